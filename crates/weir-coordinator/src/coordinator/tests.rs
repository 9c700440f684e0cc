use bytes::Bytes;

use std::sync::Arc;

use super::tests_support::*;
use super::*;
use crate::group::{JoinRequest, SyncRequest};
use crate::partition_for;
use crate::records::RecordKey;
use crate::state::GroupState;
use weir_clock::ManualClock;

#[test]
fn groups_land_where_kafka_puts_them() {
    // Values from Java: "my-group".hashCode() is -1906497762, negated by Kafka's Utils.abs
    // (masking it, as the producer's partitioner does, gives 36); the last one hashes UTF-16
    // code units, surrogates included.
    assert_eq!(partition_for("my-group", 50), 12);
    assert_eq!(partition_for("zzzzzzzzzzzz", 50), 42);
    assert_eq!(partition_for("grüße-😀", 50), 27);
}

#[tokio::test]
async fn committed_offsets_and_groups_survive_a_reload_and_deletes_are_tombstoned() {
    let log = Arc::new(MemoryLog::default());
    let first = coordinator(log.clone());
    let results = first
        .commit_offsets(
            "g",
            -1,
            "",
            None,
            &[
                entry("t", 0, 10, "m"),
                entry("t", 1, 20, "too long metadata"),
            ],
            9,
        )
        .await
        .expect("commit");
    assert_eq!(
        results,
        vec![Ok(()), Err(GroupError::OffsetMetadataTooLarge)]
    );
    first
        .commit_offsets("g", -1, "", None, &[entry("t", 0, 11, "")], 9)
        .await
        .expect("commit");
    let joined = first.join_group("h", classic_join(String::new())).await;
    assert_eq!(joined.error, None);
    let synced = first
        .sync_group(
            "h",
            SyncRequest {
                member_id: &joined.member_id,
                instance_id: None,
                generation: 1,
                protocol_type: None,
                protocol_name: None,
                assignments: vec![(joined.member_id.clone(), Bytes::from_static(b"asg"))],
            },
        )
        .await
        .expect("synced");
    assert_eq!(synced.assignment, Bytes::from_static(b"asg"));

    let second = coordinator(log.clone());
    let fetched = second.fetch_offsets("g", None, None, false).expect("fetch");
    assert_eq!(fetched.len(), 1);
    assert_eq!(
        (
            fetched[0].1,
            fetched[0].2.clone().ok().flatten().map(|v| v.offset)
        ),
        (0, Some(11))
    );
    let h = second.describe_group("h").expect("served").expect("exists");
    assert_eq!(h.state, GroupState::Stable);
    assert_eq!(h.members[0].assignment, Bytes::from_static(b"asg"));
    assert_eq!(
        second.delete_group("h").await,
        Err(GroupError::NonEmptyGroup)
    );
    assert_eq!(
        second.delete_group("nope").await,
        Err(GroupError::GroupIdNotFound)
    );
    second.delete_group("g").await.expect("deleted");

    let third = coordinator(log);
    assert_eq!(
        third.fetch_offsets("g", None, None, false).expect("fetch"),
        Vec::new()
    );
    assert!(third.list_groups().iter().all(|g| g.group_id != "g"));
    assert_eq!(
        third
            .commit_offsets("h", 5, "stranger", None, &[entry("t", 0, 1, "")], 9)
            .await,
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        third
            .commit_offsets("fresh", 3, "m", None, &[entry("t", 0, 1, "")], 9)
            .await,
        Err(GroupError::GroupIdNotFound)
    );
}

#[test]
fn groups_of_an_unloaded_partition_wait_for_the_load() {
    let coordinator = GroupCoordinator::new(
        CoordinatorSettings {
            limits: GroupLimits {
                session_timeout_min_ms: 1,
                session_timeout_max_ms: 10,
                initial_rebalance_delay_ms: 0,
                max_size: 1,
                metadata: METADATA_BOUNDS,
            },
            offset_metadata_max_bytes: 1,
            offsets_retention_ms: 1,
            offsets_retention_check_interval_ms: 1,
            consumer: CONSUMER_SETTINGS,
            share: ShareGroupSettings::default(),
        },
        Arc::new(MemoryLog::default()),
    );
    assert_eq!(
        coordinator.check_served("g"),
        Err(GroupError::CoordinatorNotAvailable)
    );
    let runtime = coordinator.topic_runtime();
    runtime.start(1);
    assert_eq!(
        coordinator.check_served("g"),
        Err(GroupError::CoordinatorLoadInProgress)
    );
    runtime.load(0, 0).expect("load");
    assert_eq!(coordinator.check_served("g"), Ok(()));
    // Leadership of the partition moved away: the group is served elsewhere, until this
    // broker leads (and loads) it again.
    runtime.unload(0);
    assert_eq!(runtime.loaded_epoch(0), None);
    assert_eq!(
        coordinator.check_served("g"),
        Err(GroupError::NotCoordinator)
    );
    runtime.load(0, 0).expect("load again");
    assert_eq!(coordinator.check_served("g"), Ok(()));
    assert_eq!(
        coordinator.check_served(""),
        Ok(()),
        "old clients commit with no group id"
    );
    assert_eq!(
        coordinator.heartbeat("", "m", None, 1),
        Err(GroupError::InvalidGroupId)
    );
    runtime.reset();
    assert_eq!(
        coordinator.check_served("g"),
        Err(GroupError::CoordinatorNotAvailable)
    );
}

/// Offset retention runs on the runtime's timer, by the clock it was given.
#[tokio::test]
async fn offsets_of_groups_without_members_expire_and_the_group_goes() {
    let log = Arc::new(MemoryLog::default());
    let clock = Arc::new(ManualClock::new(0));
    let first = coordinator_at(log.clone(), clock.clone());
    first
        .commit_offsets(
            "simple",
            -1,
            "",
            None,
            &[entry("t", 0, 10, ""), entry("t", 1, 20, "")],
            9,
        )
        .await
        .expect("commit");
    clock.advance(Duration::from_millis(999));
    first.tick();
    assert_eq!(
        first
            .fetch_offsets("simple", None, None, false)
            .expect("fetch")
            .len(),
        2,
        "not yet"
    );
    clock.advance(Duration::from_millis(1));
    first.tick();
    // The tombstones apply once durable, in a task of their own.
    tokio::task::yield_now().await;
    assert!(first
        .fetch_offsets("simple", None, None, false)
        .expect("fetch")
        .is_empty());
    assert!(first.list_groups().is_empty(), "the group is forgotten");
    let reloaded = coordinator(log);
    assert!(
        reloaded
            .fetch_offsets("simple", None, None, false)
            .expect("fetch")
            .is_empty(),
        "tombstoned"
    );
    assert!(reloaded.list_groups().is_empty());
}

mod consumer_protocol {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::assignors::TopicPartitions;
    use crate::consumer_group::{ConsumerHeartbeat, HeartbeatReply};

    fn heartbeat(member: &str, epoch: i32, owned: Option<TopicPartitions>) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            member_id: member.into(),
            member_epoch: epoch,
            rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
            topic_names: (epoch == 0).then(|| vec!["t".to_string()]),
            owned: owned.or_else(|| (epoch == 0).then(BTreeMap::new)),
            ..ConsumerHeartbeat::default()
        }
    }

    /// Member `member` joins group `g`.
    async fn join(
        coordinator: &GroupCoordinator,
        catalog: &OneTopic,
        member: &str,
    ) -> HeartbeatReply {
        coordinator
            .consumer_heartbeat("g", heartbeat(member, 0, None), 1, catalog)
            .await
            .expect("join")
    }

    /// A change whose records were not stored stays in memory, and the group's next write
    /// stores it: a member that joined, and the tombstones of one that left.
    #[tokio::test]
    async fn a_change_not_stored_is_stored_by_the_groups_next_write() {
        let log = Arc::new(MemoryLog::default());
        let catalog = OneTopic::new(4);
        let live = coordinator(log.clone());
        let a = join(&live, &catalog, "a").await;
        log.refuse(1);
        assert_eq!(
            live.consumer_heartbeat("g", heartbeat("b", 0, None), 1, &catalog)
                .await
                .map(|_| ()),
            Err(GroupError::CoordinatorNotAvailable)
        );
        let described = |c: &GroupCoordinator| {
            let mut members: Vec<String> = c
                .describe_consumer_group("g")
                .expect("served")
                .expect("a consumer group")
                .members
                .into_iter()
                .map(|m| m.member_id)
                .collect();
            members.sort();
            members
        };
        assert_eq!(described(&live), ["a", "b"], "b joined in memory");
        assert_eq!(
            described(&coordinator(log.clone())),
            ["a"],
            "not in the log"
        );
        live.consumer_heartbeat("g", heartbeat("a", a.member_epoch, None), 1, &catalog)
            .await
            .expect("a heartbeats");
        assert_eq!(described(&coordinator(log.clone())), ["a", "b"]);

        log.refuse(1);
        assert!(live
            .consumer_heartbeat("g", heartbeat("b", -1, None), 1, &catalog)
            .await
            .is_err());
        assert_eq!(described(&coordinator(log.clone())), ["a", "b"]);
        live.consumer_heartbeat("g", heartbeat("a", a.member_epoch, None), 1, &catalog)
            .await
            .expect("a heartbeats");
        assert_eq!(described(&live), ["a"]);
        assert_eq!(described(&coordinator(log)), ["a"], "b's tombstones stored");
    }

    #[tokio::test]
    async fn a_member_leaving_a_restored_group_moves_only_its_partitions() {
        let log = Arc::new(MemoryLog::default());
        let catalog = OneTopic::new(4);
        let first = coordinator(log.clone());
        let a = join(&first, &catalog, "a").await;
        join(&first, &catalog, "b").await;
        let all = a.assignment.expect("a has everything");
        let revoking = first
            .consumer_heartbeat("g", heartbeat("a", 1, Some(all)), 1, &catalog)
            .await
            .expect("a");
        let a_kept = revoking.assignment.expect("a keeps two");
        let acked = first
            .consumer_heartbeat("g", heartbeat("a", 1, Some(a_kept.clone())), 1, &catalog)
            .await
            .expect("ack");
        assert_eq!(acked.member_epoch, 2);
        let second = coordinator(log);
        // b leaves before anyone heartbeats the new coordinator: a keeps what it had.
        second
            .consumer_heartbeat("g", heartbeat("b", -1, None), 1, &catalog)
            .await
            .expect("leave");
        let a = second
            .consumer_heartbeat("g", heartbeat("a", 2, Some(a_kept.clone())), 1, &catalog)
            .await
            .expect("a");
        let now_owned = a.assignment.expect("a gains b's partitions");
        assert_eq!(now_owned.values().map(BTreeSet::len).sum::<usize>(), 4);
        for (topic, ps) in &a_kept {
            assert!(ps.is_subset(&now_owned[topic]), "nothing revoked from a");
        }
    }

    /// Groups that fill `group.coordinator.metadata.max.bytes` keep new joins out with
    /// COORDINATOR_NOT_AVAILABLE (whichever protocol) until members leave and the timer's count
    /// sees it; members already in may rejoin with what they hold.
    #[tokio::test]
    async fn the_groups_of_a_coordinator_hold_a_bounded_amount_of_metadata() {
        let bounds = MetadataBounds {
            member_max_bytes: 1_000,
            group_max_bytes: 2_000,
            coordinator_max_bytes: 3_000,
        };
        let coordinator = coordinator_bounded(Arc::new(MemoryLog::default()), bounds);
        let catalog = OneTopic::new(4);
        let classic = |group: &str, member_id: &str| JoinRequest {
            member_id: member_id.to_string(),
            group_instance_id: None,
            client_id: format!("{group}-client"),
            client_host: "/h".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 10_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), bytes::Bytes::from(vec![0u8; 895]))],
            require_known_member_id: false,
        };
        let mut members = Vec::new();
        for group in ["a", "b", "c"] {
            let joined = coordinator.join_group(group, classic(group, "")).await;
            assert_eq!(joined.error, None, "{group}");
            members.push(joined.member_id);
        }
        let refused = coordinator.join_group("d", classic("d", "")).await;
        assert_eq!(refused.error, Some(GroupError::CoordinatorNotAvailable));
        let mut too_large = classic("a", "");
        too_large.protocols[0].1 = bytes::Bytes::from(vec![0u8; 1_000]);
        let refused = coordinator.join_group("a", too_large).await;
        assert_eq!(refused.error, Some(GroupError::InvalidRequest));
        assert_eq!(
            coordinator.metadata_held(),
            3 * 900,
            "refused joins add nothing"
        );
        let mut subscription = heartbeat("x", 0, None);
        subscription.topic_names = Some(vec!["t".repeat(400)]);
        assert_eq!(
            coordinator
                .consumer_heartbeat("e", subscription.clone(), 1, &catalog)
                .await
                .err(),
            Some(GroupError::CoordinatorNotAvailable)
        );
        let rejoined = coordinator.join_group("a", classic("a", &members[0])).await;
        assert_eq!(rejoined.error, None, "a member holding its bytes rejoins");

        coordinator
            .leave_group("b", &[(members[1].clone(), None)])
            .await
            .expect("left");
        coordinator.recount_metadata();
        assert_eq!(
            coordinator.join_group("d", classic("d", "")).await.error,
            None
        );
        assert_eq!(coordinator.metadata_held(), 3 * 900);
        assert_eq!(
            coordinator
                .consumer_heartbeat("e", subscription, 1, &catalog)
                .await
                .err(),
            Some(GroupError::CoordinatorNotAvailable)
        );
    }

    #[tokio::test]
    async fn a_refused_join_creates_no_group() {
        let log = Arc::new(MemoryLog::default());
        let catalog = OneTopic::new(4);
        let coordinator = coordinator(log.clone());
        let mut bad = heartbeat("a", 0, None);
        bad.topic_names = None;
        bad.topic_regex = Some("a)|(b".into());
        assert_eq!(
            coordinator
                .consumer_heartbeat("new", bad, 1, &catalog)
                .await,
            Err(GroupError::InvalidRegularExpression)
        );
        assert!(coordinator.list_groups().is_empty());
        assert!(log.records().is_empty(), "nothing written");
    }

    #[tokio::test]
    async fn consumer_groups_survive_a_reload_and_their_deletion_is_stored() {
        let log = Arc::new(MemoryLog::default());
        let catalog = OneTopic::new(4);
        let first = coordinator(log.clone());
        let a = join(&first, &catalog, "a").await;
        let b = join(&first, &catalog, "b").await;
        assert_eq!((a.member_epoch, b.member_epoch), (1, 2));
        // a must give up two partitions: it is mid-revocation when the coordinator goes.
        let revoking = first
            .consumer_heartbeat("g", heartbeat("a", 1, None), 1, &catalog)
            .await
            .expect("heartbeat");
        let kept = revoking.assignment.expect("revocation");
        assert_eq!(kept.values().map(BTreeSet::len).sum::<usize>(), 2);
        let before = first
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");

        let second = coordinator(log.clone());
        let after = second
            .describe_consumer_group("g")
            .expect("served")
            .expect("restored");
        assert_eq!(
            after, before,
            "epochs, members, assignments and targets come back"
        );
        // a acknowledges to the new coordinator and advances; b then gets the freed partitions.
        let acked = second
            .consumer_heartbeat("g", heartbeat("a", 1, Some(kept.clone())), 1, &catalog)
            .await
            .expect("ack");
        assert_eq!(acked.member_epoch, 2);
        let b = second
            .consumer_heartbeat("g", heartbeat("b", 2, Some(BTreeMap::new())), 1, &catalog)
            .await
            .expect("b");
        assert_eq!(
            b.assignment
                .expect("freed")
                .values()
                .map(BTreeSet::len)
                .sum::<usize>(),
            2
        );
        assert_eq!(
            second
                .describe_consumer_group("g")
                .expect("served")
                .expect("g")
                .state,
            GroupState::Stable
        );

        for member in ["a", "b"] {
            second
                .consumer_heartbeat("g", heartbeat(member, -1, None), 1, &catalog)
                .await
                .expect("leave");
        }
        // Kafka replays a member's tombstones only in this order: current assignment, target,
        // subscription.
        let records = log.records();
        for member in ["a", "b"] {
            let position = |record_type: i16| {
                records.iter().position(|(key, value)| {
                    value.is_none()
                        && matches!(RecordKey::decode(key), Ok(Some(RecordKey::Consumer { key: k, .. }))
                            if k.record_type() == record_type && k.member() == Some(member))
                })
            };
            let (current, target, subscription) = (position(8), position(7), position(5));
            assert!(
                current.is_some() && current < target && target < subscription,
                "{member}"
            );
        }
        let third = coordinator(log.clone());
        let empty = third
            .describe_consumer_group("g")
            .expect("served")
            .expect("still a group");
        assert_eq!((empty.state, empty.members.len()), (GroupState::Empty, 0));
        assert_eq!(empty.epoch, 4);
        third.delete_group("g").await.expect("deleted");
        let fourth = coordinator(log);
        assert_eq!(fourth.describe_consumer_group("g"), Ok(None));
    }

    /// A target assignment too large to compute on a request's worker under the lock
    /// (members plus partitions over INLINE_ASSIGNMENT_MAX) is computed by the timer without
    /// the lock; the member is told to come back for it, and what was computed is written.
    #[tokio::test]
    async fn a_large_assignment_is_computed_by_the_timer_without_the_lock() {
        let log = Arc::new(MemoryLog::default());
        let clock = Arc::new(ManualClock::new(0));
        let catalog = OneTopic::new(1_200);
        let live = coordinator_configured(log.clone(), clock.clone(), |settings| {
            settings.consumer.heartbeat_interval_ms = 5_000;
            settings.consumer.session_timeout_ms = 45_000;
        });
        let joined = live
            .consumer_heartbeat("g", heartbeat("a", 0, None), 1, &catalog)
            .await
            .expect("join");
        assert_eq!(
            joined.assignment.map(|a| a.len()),
            Some(0),
            "not computed in the request"
        );
        assert_eq!(joined.heartbeat_interval_ms, 100, "back soon for it");
        let waiting = live
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");
        assert_eq!(
            (waiting.state, waiting.assignment_epoch),
            (GroupState::Assigning, 0)
        );

        live.tick();
        let computed = live
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");
        assert_eq!(computed.assignment_epoch, 1);
        let targeted: usize = computed.members[0]
            .target_assignment
            .values()
            .map(BTreeSet::len)
            .sum();
        assert_eq!(targeted, 1_200);
        let back = live
            .consumer_heartbeat("g", heartbeat("a", 0, None), 1, &catalog)
            .await
            .expect("heartbeat");
        let owned: usize = back
            .assignment
            .expect("assignment")
            .values()
            .map(BTreeSet::len)
            .sum();
        assert_eq!(owned, 1_200);
        let reloaded = coordinator(log)
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");
        assert_eq!(
            reloaded.assignment_epoch, 1,
            "the timer's target was written"
        );
    }

    /// While a group's deletion is being stored, the group writes nothing of its own: its
    /// target assignment falling due does not write records the log would hold after the
    /// deletion (a restart would bring the group back), and a join is told to retry.
    #[tokio::test]
    async fn a_group_being_deleted_writes_nothing_after_its_deletion() {
        let log = Arc::new(MemoryLog::default());
        let clock = Arc::new(ManualClock::new(0));
        let catalog = OneTopic::new(4);
        let live = Arc::new(coordinator_configured(
            log.clone(),
            clock.clone(),
            |settings| {
                settings.consumer.assignment_interval_ms = 1_000;
            },
        ));
        join(&live, &catalog, "a").await;
        live.consumer_heartbeat("g", heartbeat("a", -1, None), 1, &catalog)
            .await
            .expect("leave");
        // The emptied group's next target waits for the interval.
        let empty = live
            .describe_consumer_group("g")
            .expect("served")
            .expect("g");
        assert_eq!((empty.epoch, empty.assignment_epoch), (2, 1));

        log.hold();
        let deleting = tokio::spawn({
            let live = live.clone();
            async move { live.delete_group("g").await }
        });
        tokio::task::yield_now().await;
        assert_eq!(
            live.consumer_heartbeat("g", heartbeat("b", 0, None), 1, &catalog)
                .await,
            Err(GroupError::CoordinatorLoadInProgress),
            "a join waits for the deletion"
        );
        clock.advance(Duration::from_millis(1_000));
        live.tick();
        log.release();
        deleting.await.expect("task").expect("deleted");
        live.tick();
        tokio::task::yield_now().await;

        assert_eq!(live.describe_consumer_group("g"), Ok(None));
        let reloaded = coordinator(log);
        assert_eq!(
            reloaded.describe_consumer_group("g"),
            Ok(None),
            "the log holds nothing of the group after its deletion"
        );
    }

    /// Joins within group.consumer.assignment.interval.ms share one computation of the
    /// target assignment (KIP-1263): the group waits in Assigning, its new members are told
    /// to come back once the timer has computed it, and what the timer computed is written.
    #[tokio::test]
    async fn joins_within_the_assignment_interval_share_one_assignment() {
        let log = Arc::new(MemoryLog::default());
        let clock = Arc::new(ManualClock::new(0));
        let catalog = OneTopic::new(4);
        let live = coordinator_configured(log.clone(), clock.clone(), |settings| {
            settings.consumer.assignment_interval_ms = 1_000;
            settings.consumer.heartbeat_interval_ms = 5_000;
            settings.consumer.max_size = 100;
            settings.consumer.session_timeout_ms = 45_000;
        });
        let a = join(&live, &catalog, "a").await;
        assert_eq!(
            a.assignment
                .map(|a| a.values().map(BTreeSet::len).sum::<usize>()),
            Some(4)
        );
        assert_eq!(a.heartbeat_interval_ms, 5_000, "nothing pending");

        clock.advance(Duration::from_millis(10));
        for member in ["b", "c", "d"] {
            let joined = join(&live, &catalog, member).await;
            assert_eq!(
                joined.assignment.map(|a| a.len()),
                Some(0),
                "{member} waits"
            );
            assert_eq!(
                joined.heartbeat_interval_ms, 1_040,
                "{member}: back once it is computed"
            );
        }
        let waiting = live
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");
        assert_eq!((waiting.epoch, waiting.assignment_epoch), (4, 1));
        assert_eq!(waiting.state, GroupState::Assigning);

        clock.advance(Duration::from_millis(989));
        live.tick();
        let early = live
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");
        assert_eq!(early.assignment_epoch, 1, "not before the interval");
        clock.advance(Duration::from_millis(1));
        live.tick();
        let computed = live
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");
        assert_eq!(
            computed.assignment_epoch, 4,
            "the timer computed the target"
        );
        let targets = |d: &crate::ConsumerGroupDescription| -> Vec<usize> {
            d.members
                .iter()
                .map(|m| m.target_assignment.values().map(BTreeSet::len).sum())
                .collect()
        };
        assert_eq!(targets(&computed), vec![1, 1, 1, 1]);

        tokio::task::yield_now().await; // the timer's write
        let reloaded = coordinator(log);
        let restored = reloaded
            .describe_consumer_group("g")
            .expect("served")
            .expect("exists");
        assert_eq!(
            (
                restored.epoch,
                restored.assignment_epoch,
                targets(&restored)
            ),
            (4, 4, vec![1, 1, 1, 1]),
            "what the timer computed was written"
        );
    }
}

/// Replay equals live state: after every operation of a random sequence (consumer-protocol
/// joins, heartbeats and leaves, static members leaving for now and coming back under a new
/// member id, classic joins, syncs and leaves, commits, offset deletes, group deletes and
/// time passing), a coordinator loaded from the log alone describes every group as the live
/// one does, so groups that change protocol load as they were left.
mod replay {
    use std::collections::{BTreeMap, HashMap};

    use super::*;
    use crate::assignors::TopicPartitions;
    use crate::consumer_group::ConsumerHeartbeat;
    use proptest::prelude::*;

    const GROUPS: [&str; 3] = ["g0", "g1", "g2"];

    #[derive(Debug, Clone)]
    enum Op {
        /// Member `member` of consumer group `group` joins (again).
        Join { group: usize, member: usize },
        /// It heartbeats with its epoch and what it owns.
        Beat { group: usize, member: usize },
        /// It leaves.
        Leave { group: usize, member: usize },
        /// It leaves for now, as a static member (members 2 and 3 are one static instance, two
        /// incarnations: either takes over from the other once it left for now).
        StaticLeave { group: usize, member: usize },
        /// The group's classic member joins (again) and syncs. One at most: a second one's
        /// join would wait for the first to rejoin.
        ClassicJoin { group: usize },
        /// The classic member leaves.
        ClassicLeave { group: usize },
        /// A commit to the group from outside it (generation -1).
        Commit {
            group: usize,
            partition: i32,
            offset: i64,
        },
        /// OffsetDelete of one partition.
        DeleteOffset { group: usize, partition: i32 },
        /// DeleteGroups.
        DeleteGroup { group: usize },
        /// Time passes and the timer runs.
        Wait { millis: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        let group = 0..GROUPS.len();
        let member = 0..4usize;
        prop_oneof![
            3 => (group.clone(), member.clone()).prop_map(|(group, member)| Op::Join { group, member }),
            4 => (group.clone(), member.clone()).prop_map(|(group, member)| Op::Beat { group, member }),
            1 => (group.clone(), member.clone()).prop_map(|(group, member)| Op::Leave { group, member }),
            1 => (group.clone(), member).prop_map(|(group, member)| Op::StaticLeave { group, member }),
            2 => group.clone().prop_map(|group| Op::ClassicJoin { group }),
            1 => group.clone().prop_map(|group| Op::ClassicLeave { group }),
            2 => (group.clone(), 0..3i32, 0..1_000i64)
                .prop_map(|(group, partition, offset)| Op::Commit { group, partition, offset }),
            1 => (group.clone(), 0..3i32).prop_map(|(group, partition)| Op::DeleteOffset { group, partition }),
            1 => group.prop_map(|group| Op::DeleteGroup { group }),
            2 => (1..1_500u64).prop_map(|millis| Op::Wait { millis }),
        ]
    }

    /// What a group shows: its consumer-protocol description, its classic one, and its
    /// committed offsets.
    type Described = Vec<(
        &'static str,
        Result<Option<crate::ConsumerGroupDescription>, GroupError>,
        Result<Option<crate::GroupSummary>, GroupError>,
        Vec<(String, i32, Option<i64>)>,
    )>;

    fn describe(coordinator: &GroupCoordinator) -> Described {
        GROUPS
            .iter()
            .map(|&group| {
                let offsets = coordinator
                    .fetch_offsets(group, None, None, false)
                    .expect("served")
                    .into_iter()
                    .map(|(topic, partition, value)| {
                        (topic, partition, value.ok().flatten().map(|v| v.offset))
                    })
                    .collect();
                (
                    group,
                    coordinator.describe_consumer_group(group),
                    coordinator.describe_group(group),
                    offsets,
                )
            })
            .collect()
    }

    /// Runs `ops` against groups subscribed to a topic of `partitions` (a large one makes
    /// the timer compute assignments outside the lock).
    async fn run(partitions: i32, ops: Vec<Op>) {
        let log = Arc::new(MemoryLog::default());
        let clock = Arc::new(ManualClock::new(0));
        let catalog = OneTopic::new(partitions);
        let live = coordinator_configured(log.clone(), clock.clone(), |settings| {
            settings.consumer.assignment_interval_ms = 500;
            settings.consumer.max_size = 10;
            settings.offsets_retention_ms = 60_000;
        });
        // What each member believes: its epoch and the partitions it owns.
        let mut members: HashMap<(usize, usize), (i32, TopicPartitions)> = HashMap::new();
        // The member id of each group's classic member.
        let mut classic: HashMap<usize, String> = HashMap::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op.clone() {
                Op::Join { group, member }
                | Op::Beat { group, member }
                | Op::Leave { group, member }
                | Op::StaticLeave { group, member } => {
                    let id = format!("m{member}");
                    let leave = match op {
                        Op::Leave { .. } => Some(-1),
                        Op::StaticLeave { .. } => Some(-2),
                        _ => None,
                    };
                    let mut request = match (&op, members.get(&(group, member))) {
                        (Op::Join { .. }, _) | (_, None) if leave.is_none() => ConsumerHeartbeat {
                            member_id: id,
                            member_epoch: 0,
                            rebalance_timeout_ms: 1_000,
                            topic_names: Some(vec!["t".to_string()]),
                            owned: Some(BTreeMap::new()),
                            ..ConsumerHeartbeat::default()
                        },
                        (_, None) | (Op::Leave { .. } | Op::StaticLeave { .. }, _) => {
                            ConsumerHeartbeat {
                                member_id: id,
                                member_epoch: leave.unwrap_or(-1),
                                rebalance_timeout_ms: -1,
                                ..ConsumerHeartbeat::default()
                            }
                        }
                        (_, Some((epoch, owned))) => ConsumerHeartbeat {
                            member_id: id,
                            member_epoch: *epoch,
                            rebalance_timeout_ms: -1,
                            owned: Some(owned.clone()),
                            ..ConsumerHeartbeat::default()
                        },
                    };
                    if member >= 2 {
                        request.instance_id = Some("s".to_string());
                    }
                    let leaving = request.member_epoch < 0;
                    match live
                        .consumer_heartbeat(GROUPS[group], request, 1, &catalog)
                        .await
                    {
                        Ok(_) if leaving => {
                            members.remove(&(group, member));
                        }
                        Ok(reply) => {
                            let owned = reply.assignment.unwrap_or_else(|| {
                                members
                                    .get(&(group, member))
                                    .map(|m| m.1.clone())
                                    .unwrap_or_default()
                            });
                            members.insert((group, member), (reply.member_epoch, owned));
                        }
                        Err(_) => {
                            members.remove(&(group, member));
                        }
                    }
                }
                Op::ClassicJoin { group } => {
                    let id = classic.get(&group).cloned().unwrap_or_default();
                    match classic_join_and_sync(&live, GROUPS[group], id).await {
                        Some(id) => classic.insert(group, id),
                        None => classic.remove(&group),
                    };
                }
                Op::ClassicLeave { group } => {
                    if let Some(id) = classic.remove(&group) {
                        let _ = live.leave_group(GROUPS[group], &[(id, None)]).await;
                    }
                }
                Op::Commit {
                    group,
                    partition,
                    offset,
                } => {
                    let _ = live
                        .commit_offsets(
                            GROUPS[group],
                            -1,
                            "",
                            None,
                            &[entry("t", partition, offset, "")],
                            9,
                        )
                        .await;
                }
                Op::DeleteOffset { group, partition } => {
                    let _ = live
                        .delete_offsets(GROUPS[group], &[("t".to_string(), partition)])
                        .await;
                }
                Op::DeleteGroup { group } => {
                    let _ = live.delete_group(GROUPS[group]).await;
                }
                Op::Wait { millis } => {
                    clock.advance(Duration::from_millis(millis));
                    live.tick();
                }
            }
            tokio::task::yield_now().await;
            let replayed = coordinator(log.clone());
            assert_eq!(
                describe(&replayed),
                describe(&live),
                "after step {step} ({op:?}), a coordinator loaded from the log differs"
            );
        }
    }

    /// A classic member (`member_id` empty: a new one) joins a group it is alone in, which
    /// completes the join at once, and syncs its assignment as the leader. Its member id, if
    /// the join let it in.
    async fn classic_join_and_sync(
        coordinator: &GroupCoordinator,
        group: &str,
        member_id: String,
    ) -> Option<String> {
        let joined = coordinator.join_group(group, classic_join(member_id)).await;
        if joined.error.is_some() {
            return None;
        }
        let assignment = Bytes::from(format!("generation {}", joined.generation));
        let _ = coordinator
            .sync_group(
                group,
                SyncRequest {
                    member_id: &joined.member_id,
                    instance_id: None,
                    generation: joined.generation,
                    protocol_type: Some("consumer"),
                    protocol_name: Some("range"),
                    assignments: vec![(joined.member_id.clone(), assignment)],
                },
            )
            .await;
        Some(joined.member_id)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn a_group_shard_replayed_from_its_records_equals_the_live_one(
            partitions in prop_oneof![Just(6), Just(1_200)],
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("runtime")
                .block_on(run(partitions, ops));
        }
    }
}
