//! What the coordinator's tests share: an offsets topic in memory and settings.

use std::sync::Arc;

use super::*;
use crate::group::JoinRequest;
pub(super) use crate::test_log::MemoryLog;
use weir_clock::{Clock, ManualClock};

pub(super) const PARTITIONS: i32 = 4;

pub(super) const METADATA_BOUNDS: MetadataBounds = MetadataBounds {
    member_max_bytes: 1 << 20,
    group_max_bytes: 32 << 20,
    coordinator_max_bytes: 256 << 20,
};

pub(super) const CONSUMER_SETTINGS: ConsumerGroupSettings = ConsumerGroupSettings {
    session_timeout_ms: 1_000,
    heartbeat_interval_ms: 100,
    max_size: 3,
    assignment_interval_ms: 0,
    metadata: METADATA_BOUNDS,
};

pub(super) fn coordinator(log: Arc<MemoryLog>) -> GroupCoordinator {
    coordinator_bounded(log, METADATA_BOUNDS)
}

/// [`coordinator`] holding at most `bounds` of member metadata.
pub(super) fn coordinator_bounded(log: Arc<MemoryLog>, bounds: MetadataBounds) -> GroupCoordinator {
    loaded(GroupCoordinator::new(settings(bounds), log))
}

/// [`coordinator`] reading the time from `clock`, checking offset retention every
/// millisecond.
pub(super) fn coordinator_at(log: Arc<MemoryLog>, clock: Arc<ManualClock>) -> GroupCoordinator {
    coordinator_configured(log, clock, |settings| {
        settings.offsets_retention_check_interval_ms = 1;
    })
}

/// [`coordinator`] reading the time from `clock`, with settings changed by `adjust`.
pub(super) fn coordinator_configured(
    log: Arc<MemoryLog>,
    clock: Arc<ManualClock>,
    adjust: impl FnOnce(&mut CoordinatorSettings),
) -> GroupCoordinator {
    let mut settings = settings(METADATA_BOUNDS);
    adjust(&mut settings);
    let clock: Arc<dyn Clock> = clock;
    loaded(GroupCoordinator::with_clock(settings, log, clock))
}

/// Every partition started and loaded.
fn loaded(coordinator: GroupCoordinator) -> GroupCoordinator {
    let runtime = coordinator.topic_runtime();
    runtime.start(PARTITIONS);
    for p in 0..PARTITIONS {
        runtime.load(p, 0).expect("load");
    }
    coordinator
}

fn settings(bounds: MetadataBounds) -> CoordinatorSettings {
    CoordinatorSettings {
        limits: GroupLimits {
            session_timeout_min_ms: 1_000,
            session_timeout_max_ms: 100_000,
            initial_rebalance_delay_ms: 0,
            max_size: 10,
            metadata: bounds,
        },
        offset_metadata_max_bytes: 8,
        offsets_retention_ms: 1_000,
        offsets_retention_check_interval_ms: 1_000,
        consumer: ConsumerGroupSettings {
            metadata: bounds,
            ..CONSUMER_SETTINGS
        },
        share: ShareGroupSettings::default(),
    }
}

/// A classic member's JoinGroup (`member_id` empty: a new member) with one protocol, `range`.
pub(super) fn classic_join(member_id: String) -> JoinRequest {
    JoinRequest {
        member_id,
        group_instance_id: None,
        client_id: "c".into(),
        client_host: "/h".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), bytes::Bytes::from_static(b"sub"))],
        require_known_member_id: false,
    }
}

pub(super) fn entry(topic: &str, partition: i32, offset: i64, metadata: &str) -> CommitEntry {
    CommitEntry {
        topic: topic.into(),
        partition,
        offset,
        leader_epoch: 0,
        metadata: metadata.into(),
    }
}

impl GroupCoordinator {
    /// A classic member joins `group` alone and syncs its assignment (generation 1); its id.
    pub(super) async fn join_and_sync(&self, group: &str) -> String {
        let joined = self.join_group(group, classic_join(String::new())).await;
        assert_eq!(joined.error, None);
        self.sync_group(
            group,
            crate::group::SyncRequest {
                member_id: &joined.member_id,
                instance_id: None,
                generation: 1,
                protocol_type: None,
                protocol_name: None,
                assignments: vec![(joined.member_id.clone(), bytes::Bytes::from_static(b"asg"))],
            },
        )
        .await
        .expect("synced");
        joined.member_id
    }

    /// Bytes of member metadata the groups hold, as admission counts them.
    pub(super) fn metadata_held(&self) -> usize {
        self.runtime
            .lock()
            .shards()
            .map(|shard| shard.metadata_held)
            .sum()
    }

    /// Counts the member metadata of every group exactly, as the timer does.
    pub(super) fn recount_metadata(&self) {
        for (_, shard) in self.runtime.lock().shards_mut() {
            shard.recount_metadata();
        }
    }

    /// Runs the timers' work that is due by the clock now.
    pub(super) fn tick(&self) {
        self.runtime.tick();
    }
}

/// A catalog of one topic, `t`, with `partitions` partitions.
pub(super) struct OneTopic {
    id: uuid::Uuid,
    partitions: i32,
}

impl OneTopic {
    pub(super) fn new(partitions: i32) -> OneTopic {
        OneTopic {
            id: uuid::Uuid::new_v4(),
            partitions,
        }
    }
}

impl crate::consumer_group::TopicCatalog for OneTopic {
    fn topic(&self, name: &str) -> Option<(uuid::Uuid, i32)> {
        (name == "t").then_some((self.id, self.partitions))
    }
    fn topic_name(&self, id: uuid::Uuid) -> Option<String> {
        (id == self.id).then(|| "t".to_string())
    }
    fn topic_names(&self) -> Vec<String> {
        vec!["t".to_string()]
    }
    fn version(&self) -> u64 {
        0
    }
}
