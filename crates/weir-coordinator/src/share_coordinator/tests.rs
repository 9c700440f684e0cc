//! The share coordinator against a `__share_group_state` in memory.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use uuid::Uuid;

use super::*;
use crate::test_log::MemoryLog;

const PARTITIONS: i32 = 3;

/// A coordinator serving every partition of `log`, loaded from what it holds.
fn loaded(log: Arc<MemoryLog>) -> ShareCoordinator {
    let coordinator = ShareCoordinator::new(log);
    let runtime = coordinator.topic_runtime();
    runtime.start(PARTITIONS);
    for partition in 0..PARTITIONS {
        runtime.load(partition, 0).expect("load");
    }
    coordinator
}

fn key(group: &str, partition: i32) -> SharePartitionKey {
    SharePartitionKey {
        group: group.to_string(),
        topic_id: Uuid::from_u128(7),
        partition,
    }
}

fn batch(first_offset: i64, last_offset: i64, state: i8, count: i16) -> PersistedBatch {
    PersistedBatch {
        first_offset,
        last_offset,
        delivery_state: state,
        delivery_count: count,
    }
}

fn write(leader_epoch: i32, start_offset: i64, batches: Vec<PersistedBatch>) -> StateWrite {
    StateWrite {
        state_epoch: 0,
        leader_epoch,
        start_offset,
        batches,
    }
}

#[tokio::test]
async fn state_is_initialized_written_read_and_survives_a_reload() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let orders = key("g", 0);
    let unread = coordinator.read(&orders, 1).await.expect("read");
    assert_eq!(unread.start_offset, -1, "never initialized");
    assert_eq!(
        coordinator.write(&orders, &write(1, 0, vec![])).await,
        Err(ShareStateError::UnknownTopicOrPartition)
    );
    coordinator.initialize(&orders, 0, 10).await.expect("init");
    coordinator
        .write(&orders, &write(1, -1, vec![batch(10, 14, 2, 1)]))
        .await
        .expect("write");
    coordinator
        .write(
            &orders,
            &write(1, 12, vec![batch(13, 13, 0, 2), batch(15, 16, 4, 5)]),
        )
        .await
        .expect("write");
    let expected = PersistedState {
        state_epoch: 0,
        start_offset: 12,
        batches: vec![
            batch(12, 12, 2, 1),
            batch(13, 13, 0, 2),
            batch(14, 14, 2, 1),
            batch(15, 16, 4, 5),
        ],
    };
    assert_eq!(coordinator.read(&orders, 1).await, Ok(expected.clone()));
    let reloaded = loaded(log);
    assert_eq!(reloaded.read(&orders, 1).await, Ok(expected));
    let summary = reloaded.read_summary(&orders).expect("summary");
    assert_eq!(
        (
            summary.leader_epoch,
            summary.start_offset,
            summary.delivery_complete_count
        ),
        (1, 12, 4),
        "12 and 14 acknowledged, 15–16 archived"
    );
}

#[tokio::test]
async fn a_read_at_a_newer_leader_epoch_fences_the_older_leader() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let orders = key("g", 1);
    coordinator.initialize(&orders, 0, 0).await.expect("init");
    coordinator
        .write(&orders, &write(3, -1, vec![batch(0, 0, 2, 1)]))
        .await
        .expect("write at 3");
    coordinator
        .read(&orders, 4)
        .await
        .expect("new leader reads");
    assert_eq!(
        coordinator
            .write(&orders, &write(3, -1, vec![batch(1, 1, 2, 1)]))
            .await,
        Err(ShareStateError::FencedLeaderEpoch),
        "the old leader's write after the new leader's read"
    );
    assert_eq!(
        coordinator.read(&orders, 3).await,
        Err(ShareStateError::FencedLeaderEpoch)
    );
    // The new epoch was stored: a reload fences the old leader too.
    let reloaded = loaded(log);
    assert_eq!(
        reloaded.read_summary(&orders).map(|s| s.leader_epoch),
        Ok(4)
    );
}

#[tokio::test]
async fn initialize_again_and_state_epochs() {
    let coordinator = loaded(Arc::new(MemoryLog::default()));
    let orders = key("g", 2);
    coordinator.initialize(&orders, 2, 5).await.expect("init");
    assert_eq!(
        coordinator.initialize(&orders, 1, 0).await,
        Err(ShareStateError::FencedStateEpoch)
    );
    let stale = StateWrite {
        state_epoch: 1,
        ..write(-1, -1, vec![])
    };
    assert_eq!(
        coordinator.write(&orders, &stale).await,
        Err(ShareStateError::FencedStateEpoch)
    );
    coordinator
        .write(&orders, &write(0, -1, vec![batch(5, 9, 2, 1)]))
        .await
        .expect_err("state epoch 0 is older than 2");
    coordinator
        .initialize(&orders, 3, 100)
        .await
        .expect("reset");
    let state = coordinator.read(&orders, -1).await.expect("read");
    assert_eq!((state.state_epoch, state.start_offset), (3, 100));
    assert!(state.batches.is_empty());
}

#[tokio::test]
async fn delete_forgets_the_state_across_a_reload_and_bad_writes_change_nothing() {
    let log = Arc::new(MemoryLog::default());
    let coordinator = loaded(log.clone());
    let orders = key("g", 0);
    let other = key("h", 0);
    coordinator.initialize(&orders, 0, 0).await.expect("init");
    coordinator.initialize(&other, 0, 7).await.expect("init");
    for bad in [
        write(-1, -2, vec![]),
        write(-1, -1, vec![batch(5, 4, 2, 1)]),
        write(-1, -1, vec![batch(-3, 4, 2, 1)]),
    ] {
        assert_eq!(
            coordinator.write(&orders, &bad).await,
            Err(ShareStateError::InvalidRequest)
        );
    }
    let too_many = (0..=STATE_BATCHES_MAX as i64)
        .map(|offset| batch(offset, offset, 2, 1))
        .collect();
    assert_eq!(
        coordinator.write(&orders, &write(-1, -1, too_many)).await,
        Err(ShareStateError::InvalidRequest)
    );
    coordinator.delete(&orders).await.expect("delete");
    coordinator
        .delete(&orders)
        .await
        .expect("nothing to delete");
    let reloaded = loaded(log);
    assert_eq!(
        reloaded.read_summary(&orders).map(|s| s.start_offset),
        Ok(-1)
    );
    assert_eq!(reloaded.read_summary(&other).map(|s| s.start_offset), Ok(7));
}

#[tokio::test]
async fn nothing_is_served_before_the_topic_or_for_partitions_led_elsewhere() {
    let coordinator = ShareCoordinator::new(Arc::new(MemoryLog::default()));
    assert_eq!(
        coordinator.read(&key("g", 0), 1).await,
        Err(ShareStateError::CoordinatorNotAvailable)
    );
    let runtime = coordinator.topic_runtime();
    runtime.start(PARTITIONS);
    let orders = key("g", 0);
    assert_eq!(
        coordinator.read(&orders, 1).await,
        Err(ShareStateError::CoordinatorLoadInProgress)
    );
    let partition = crate::partition_for(&orders.coordinator_key(), PARTITIONS);
    runtime.load(partition, 0).expect("load");
    coordinator.read(&orders, 1).await.expect("served");
    runtime.unload(partition);
    assert_eq!(
        coordinator.check_served(&orders.coordinator_key()),
        Err(ShareStateError::NotCoordinator)
    );
}

/// Each offset's state after laying batches over others, one offset at a time.
fn model(layers: &[Vec<(i64, i64, i8)>], start_offset: i64) -> BTreeMap<i64, i8> {
    let mut offsets = BTreeMap::new();
    for layer in layers {
        for &(first, last, state) in layer {
            for offset in first..=last {
                offsets.insert(offset, state);
            }
        }
    }
    offsets.retain(|offset, _| *offset >= start_offset);
    offsets
}

proptest! {
    /// Overlaying batches gives each offset the state of the newest batch covering it, with
    /// nothing before the start offset, in ordered batches that do not overlap.
    #[test]
    fn overlay_keeps_the_newest_state_of_each_offset(
        layers in proptest::collection::vec(
            proptest::collection::vec((0i64..40, 0i64..6, 0i8..5), 0..5), 1..5),
        start_offset in 0i64..30,
    ) {
        let layers: Vec<Vec<(i64, i64, i8)>> = layers
            .into_iter()
            .map(|layer| layer.into_iter().map(|(first, len, state)| (first, first + len, state)).collect())
            .collect();
        let mut batches = Vec::new();
        for layer in &layers {
            let update: Vec<PersistedBatch> =
                layer.iter().map(|&(first, last, state)| batch(first, last, state, 1)).collect();
            batches = overlay(&batches, &update, 0);
        }
        batches = overlay(&batches, &[], start_offset);
        let mut seen = BTreeMap::new();
        let mut previous_last = -1;
        for b in &batches {
            prop_assert!(b.first_offset > previous_last && b.first_offset <= b.last_offset);
            previous_last = b.last_offset;
            for offset in b.first_offset..=b.last_offset {
                seen.insert(offset, b.delivery_state);
            }
        }
        prop_assert_eq!(seen, model(&layers, start_offset));
    }
}
