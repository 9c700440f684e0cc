//! The consumer group protocol, driven through [`ConsumerGroup`] with a catalog of topics.

use std::collections::HashMap;

use super::reconcile::flatten;
use super::*;

/// Topics by name.
#[derive(Default)]
struct Catalog(HashMap<String, (Uuid, i32)>);

impl Catalog {
    fn with(topics: &[(&str, i32)]) -> Catalog {
        let mut catalog = Catalog::default();
        for (name, partitions) in topics {
            catalog.add(name, *partitions);
        }
        catalog
    }

    fn add(&mut self, name: &str, partitions: i32) {
        self.0
            .insert(name.to_string(), (Uuid::new_v4(), partitions));
    }
}

impl TopicCatalog for Catalog {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0.get(name).copied()
    }

    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.0
            .iter()
            .find(|(_, (t, _))| *t == id)
            .map(|(n, _)| n.clone())
    }

    fn topic_names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }

    fn version(&self) -> u64 {
        self.0.len() as u64 // these tests only add topics
    }
}

const SETTINGS: ConsumerGroupSettings = ConsumerGroupSettings {
    session_timeout_ms: 45_000,
    heartbeat_interval_ms: 5_000,
    max_size: 4,
    assignment_interval_ms: 0,
    metadata: MetadataBounds {
        member_max_bytes: 1_000,
        group_max_bytes: 2_500,
        coordinator_max_bytes: 10_000,
    },
};

impl ConsumerHeartbeat {
    fn with_epoch(self, member_epoch: i32) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            member_epoch,
            ..self
        }
    }
}

/// A client that gives up revoked partitions at once and reports what it owns.
struct Client {
    id: String,
    epoch: i32,
    owned: TopicPartitions,
    topics: Vec<String>,
}

impl Client {
    fn new(id: &str, topics: &[&str]) -> Client {
        Client {
            id: id.to_string(),
            epoch: 0,
            owned: TopicPartitions::new(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn request(&self) -> ConsumerHeartbeat {
        ConsumerHeartbeat {
            member_id: self.id.clone(),
            member_epoch: self.epoch,
            rebalance_timeout_ms: 30_000,
            topic_names: Some(self.topics.clone()),
            owned: Some(self.owned.clone()),
            ..ConsumerHeartbeat::default()
        }
    }

    fn beat(&mut self, group: &mut ConsumerGroup, catalog: &Catalog, now: Instant) {
        let reply = group
            .heartbeat("g", self.request(), catalog, &SETTINGS, now)
            .expect("heartbeat");
        self.epoch = reply.member_epoch;
        if let Some(assignment) = reply.assignment {
            self.owned = assignment;
        }
    }

    fn count(&self) -> usize {
        self.owned.values().map(BTreeSet::len).sum()
    }
}

/// Heartbeats every client in turn until the group is Stable, checking after each
/// heartbeat that no partition has two owners; returns the rounds it took.
fn settle(
    group: &mut ConsumerGroup,
    clients: &mut [Client],
    catalog: &Catalog,
    now: Instant,
) -> usize {
    for round in 1..=10 {
        for i in 0..clients.len() {
            clients[i].beat(group, catalog, now);
            let mut seen = BTreeSet::new();
            for client in clients.iter() {
                for p in flatten(&client.owned) {
                    assert!(seen.insert(p), "{p:?} owned twice");
                }
            }
        }
        if group.state() == GroupState::Stable {
            return round;
        }
    }
    panic!("the group did not settle: {:?}", group.state());
}

#[test]
fn a_heartbeat_that_only_keeps_alive_does_not_resolve_topics_again() {
    let catalog = Catalog::with(&[("t", 2), ("u", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut clients = [Client::new("a", &["t"])];
    settle(&mut group, &mut clients, &catalog, now);
    let generation = group.subscriptions.generation;
    let resolved_at = group.resolved_at;
    for _ in 0..3 {
        clients[0].beat(&mut group, &catalog, now);
    }
    assert_eq!(group.subscriptions.generation, generation);
    assert_eq!(group.resolved_at, resolved_at);

    clients[0].topics = vec!["t".into(), "u".into()];
    clients[0].beat(&mut group, &catalog, now);
    assert_ne!(group.subscriptions.generation, generation);
    assert_eq!(group.subscriptions.names.len(), 2);
    settle(&mut group, &mut clients, &catalog, now);
    assert_eq!(clients[0].count(), 4);
}

#[test]
fn members_join_and_leave_and_only_moved_partitions_are_revoked() {
    let catalog = Catalog::with(&[("t", 6)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut clients = vec![Client::new("a", &["t"])];
    settle(&mut group, &mut clients, &catalog, now);
    assert_eq!(clients[0].count(), 6);
    assert_eq!(clients[0].epoch, 1);

    for id in ["b", "c"] {
        let before: Vec<TopicPartitions> = clients.iter().map(|c| c.owned.clone()).collect();
        clients.push(Client::new(id, &["t"]));
        settle(&mut group, &mut clients, &catalog, now);
        for (client, before) in clients.iter().zip(&before) {
            assert!(
                is_subset(&client.owned, before),
                "{} only loses partitions",
                client.id
            );
        }
    }
    assert!(clients.iter().all(|c| c.count() == 2));
    assert_eq!(group.describe().epoch, 3);

    let kept: Vec<TopicPartitions> = clients[..2].iter().map(|c| c.owned.clone()).collect();
    let leaving = clients.pop().expect("c");
    let reply = group
        .heartbeat(
            "g",
            ConsumerHeartbeat {
                member_epoch: LEAVE_EPOCH,
                ..leaving.request()
            },
            &catalog,
            &SETTINGS,
            now,
        )
        .expect("leave");
    assert_eq!(reply.member_epoch, LEAVE_EPOCH);
    settle(&mut group, &mut clients, &catalog, now);
    for (client, kept) in clients.iter().zip(&kept) {
        assert!(
            is_subset(kept, &client.owned),
            "{} keeps its partitions",
            client.id
        );
        assert_eq!(client.count(), 3);
    }
}

#[test]
fn a_partition_moves_only_after_its_owner_revoked_it() {
    let catalog = Catalog::with(&[("t", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut a = Client::new("a", &["t"]);
    a.beat(&mut group, &catalog, now);
    assert_eq!(a.count(), 2);
    let mut b = Client::new("b", &["t"]);
    b.beat(&mut group, &catalog, now);
    assert_eq!(b.epoch, 2, "b is at the new epoch");
    assert_eq!(b.count(), 0, "but a still holds its partition");
    // a learns it must give one up; it keeps its epoch until it has.
    let reply = group
        .heartbeat("g", a.request(), &catalog, &SETTINGS, now)
        .expect("heartbeat");
    assert_eq!(reply.member_epoch, 1);
    let assignment = reply.assignment.expect("revocation");
    assert_eq!(assignment.values().map(BTreeSet::len).sum::<usize>(), 1);
    b.beat(&mut group, &catalog, now);
    assert_eq!(b.count(), 0, "not released yet");
    a.owned = assignment;
    a.beat(&mut group, &catalog, now);
    assert_eq!(a.epoch, 2);
    b.beat(&mut group, &catalog, now);
    assert_eq!(b.count(), 1);
    assert_eq!(group.state(), GroupState::Stable);
}

#[test]
fn epochs_are_checked_and_stale_members_fenced() {
    let catalog = Catalog::with(&[("t", 4)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut a = Client::new("a", &["t"]);
    a.beat(&mut group, &catalog, now);
    let mut b = Client::new("b", &["t"]);
    let mut clients = [a, Client::new("x", &["t"])];
    settle(&mut group, &mut clients, &catalog, now);
    let [a, _] = &mut clients;
    let beat = |group: &mut ConsumerGroup, request| {
        group.heartbeat("g", request, &catalog, &SETTINGS, now)
    };
    assert_eq!(
        beat(
            &mut group,
            ConsumerHeartbeat {
                member_epoch: a.epoch + 1,
                ..a.request()
            }
        ),
        Err(GroupError::FencedMemberEpoch)
    );
    assert_eq!(
        beat(
            &mut group,
            ConsumerHeartbeat {
                member_epoch: 5,
                ..b.request()
            }
        ),
        Err(GroupError::UnknownMemberId)
    );
    // The previous epoch is accepted from a member that owns no more than it has.
    let previous = ConsumerHeartbeat {
        member_epoch: 1,
        ..a.request()
    };
    assert_eq!(
        beat(&mut group, previous).map(|r| r.member_epoch),
        Ok(a.epoch)
    );
    assert_eq!(
        group.check_commit(&a.id, a.epoch, 9),
        Ok(()),
        "a commit at the member's epoch"
    );
    assert_eq!(
        group.check_commit(&a.id, a.epoch - 1, 9),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        group.check_commit(&a.id, a.epoch + 1, 9),
        Err(GroupError::StaleMemberEpoch)
    );
    assert_eq!(
        group.check_commit(&a.id, a.epoch, 8),
        Err(GroupError::UnsupportedVersion)
    );
    assert_eq!(
        group.check_commit("nobody", 1, 9),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        group.check_commit("", -1, 9),
        Err(GroupError::UnknownMemberId),
        "not empty"
    );
    assert_eq!(
        group.check_fetch(&a.id, a.epoch - 1),
        Err(GroupError::StaleMemberEpoch)
    );

    // Bad joins change nothing.
    let epoch = group.epoch();
    for (request, error) in [
        (
            ConsumerHeartbeat {
                topic_names: None,
                ..b.request()
            },
            GroupError::InvalidRequest,
        ),
        (
            ConsumerHeartbeat {
                rebalance_timeout_ms: -1,
                ..b.request()
            },
            GroupError::InvalidRequest,
        ),
        (
            ConsumerHeartbeat {
                owned: None,
                ..b.request()
            },
            GroupError::InvalidRequest,
        ),
        (
            ConsumerHeartbeat {
                server_assignor: Some("sticky".into()),
                ..b.request()
            },
            GroupError::UnsupportedAssignor,
        ),
        (
            ConsumerHeartbeat {
                topic_regex: Some("(unclosed".into()),
                ..b.request()
            },
            GroupError::InvalidRegularExpression,
        ),
        (
            ConsumerHeartbeat {
                member_epoch: -3,
                ..b.request()
            },
            GroupError::InvalidRequest,
        ),
        (
            ConsumerHeartbeat {
                member_epoch: STATIC_LEAVE_EPOCH,
                ..a.request()
            },
            GroupError::InvalidRequest,
        ),
    ] {
        assert_eq!(beat(&mut group, request), Err(error));
    }
    assert_eq!(group.epoch(), epoch);
    assert!(!group.members.contains_key("b"));
    b.beat(&mut group, &catalog, now);
    let mut full = [Client::new("c", &["t"]), Client::new("d", &["t"])];
    full[0].beat(&mut group, &catalog, now);
    assert_eq!(
        beat(&mut group, full[1].request()),
        Err(GroupError::GroupMaxSizeReached)
    );
}

#[test]
fn silent_members_are_fenced_and_static_members_come_back() {
    let catalog = Catalog::with(&[("t", 4)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut clients = [Client::new("a", &["t"]), Client::new("s1", &["t"])];
    let static_request = |c: &Client| ConsumerHeartbeat {
        instance_id: Some("instance".into()),
        ..c.request()
    };
    group
        .heartbeat("g", static_request(&clients[1]), &catalog, &SETTINGS, now)
        .expect("static join");
    settle(&mut group, &mut clients, &catalog, now);
    let held = clients[1].owned.clone();
    assert_eq!(clients[1].count(), 2);

    // The static member leaves for now: its partitions wait for it.
    let leave = ConsumerHeartbeat {
        member_epoch: STATIC_LEAVE_EPOCH,
        ..static_request(&clients[1])
    };
    let reply = group
        .heartbeat("g", leave, &catalog, &SETTINGS, now)
        .expect("leave");
    assert_eq!(reply.member_epoch, STATIC_LEAVE_EPOCH);
    clients[0].beat(&mut group, &catalog, now);
    assert_eq!(clients[0].count(), 2, "nothing moved");
    // Its instance comes back under a new member id and gets them back, same epoch.
    let back = Client::new("s2", &["t"]);
    let reply = group
        .heartbeat("g", static_request(&back), &catalog, &SETTINGS, now)
        .expect("rejoin");
    assert_eq!(reply.assignment, Some(held));
    assert_eq!(reply.member_epoch, clients[1].epoch);
    // A second instance with the same id while it is there is refused.
    let twin = Client::new("s3", &["t"]);
    assert_eq!(
        group.heartbeat("g", static_request(&twin), &catalog, &SETTINGS, now),
        Err(GroupError::UnreleasedInstanceId)
    );
    // The replaced member id is told it was fenced by its instance.
    assert_eq!(
        group.heartbeat(
            "g",
            static_request(&clients[1]).with_epoch(reply.member_epoch),
            &catalog,
            &SETTINGS,
            now
        ),
        Err(GroupError::FencedInstanceId)
    );
    // Coming back under another live member's id is refused and changes nothing.
    let leave = ConsumerHeartbeat {
        member_epoch: STATIC_LEAVE_EPOCH,
        ..static_request(&back)
    };
    group
        .heartbeat("g", leave, &catalog, &SETTINGS, now)
        .expect("leave again");
    let thief = Client::new("a", &["t"]);
    assert_eq!(
        group.heartbeat("g", static_request(&thief), &catalog, &SETTINGS, now),
        Err(GroupError::InvalidRequest)
    );
    let rejoin = group
        .heartbeat("g", static_request(&back), &catalog, &SETTINGS, now)
        .expect("back again");
    assert_eq!(rejoin.assignment.map(|a| flatten(&a).len()), Some(2));

    // a heartbeats, s2 goes silent: after the session timeout s2 is removed.
    let later = now + Duration::from_millis(SETTINGS.session_timeout_ms as u64 - 1);
    clients[0].beat(&mut group, &catalog, later);
    assert!(!group.tick("g", later));
    let expired = now + Duration::from_millis(SETTINGS.session_timeout_ms as u64);
    assert!(!group.tick("g", expired), "a is still there");
    assert_eq!(group.describe().members.len(), 1);
    clients[0].beat(&mut group, &catalog, expired);
    assert_eq!(clients[0].count(), 4);

    // A member that does not revoke within its rebalance timeout is fenced.
    let mut c = Client::new("c", &["t"]);
    c.beat(&mut group, &catalog, expired);
    let reply = group
        .heartbeat("g", clients[0].request(), &catalog, &SETTINGS, expired)
        .expect("heartbeat");
    assert!(reply.assignment.is_some(), "asked to revoke");
    let deadline = group.next_deadline().expect("deadline");
    assert_eq!(deadline, expired + Duration::from_millis(30_000));
    assert!(!group.tick("g", deadline));
    c.beat(&mut group, &catalog, deadline);
    assert_eq!(c.count(), 4, "c gets everything once a is fenced");
    assert_eq!(
        group.heartbeat("g", clients[0].request(), &catalog, &SETTINGS, deadline),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn patterns_and_topic_changes_move_the_group_epoch() {
    let mut catalog = Catalog::with(&[("orders-eu", 2), ("payments", 2)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    let mut client = Client::new("a", &[]);
    let pattern = |c: &Client| ConsumerHeartbeat {
        topic_names: None,
        topic_regex: Some("orders-.*".into()),
        ..c.request()
    };
    let reply = group
        .heartbeat("g", pattern(&client), &catalog, &SETTINGS, now)
        .expect("join");
    client.epoch = reply.member_epoch;
    client.owned = reply.assignment.expect("assignment");
    assert_eq!(client.count(), 2, "the whole name must match: not payments");
    let epoch = group.epoch();
    catalog.add("orders-us", 3);
    let reply = group
        .heartbeat(
            "g",
            ConsumerHeartbeat {
                topic_regex: None,
                ..pattern(&client)
            },
            &catalog,
            &SETTINGS,
            now,
        )
        .expect("heartbeat");
    assert_eq!(reply.member_epoch, epoch + 1);
    let assigned = reply.assignment.expect("new topic");
    assert_eq!(assigned.values().map(BTreeSet::len).sum::<usize>(), 5);
    assert_eq!(group.subscribed_topics(), vec!["orders-eu", "orders-us"]);
}

#[test]
fn subscriptions_over_the_member_and_group_bounds_are_refused() {
    let catalog = Catalog::with(&[("t", 6)]);
    let now = Instant::now();
    let mut group = ConsumerGroup::default();
    // Topic names need not exist: a subscription is held whatever it names.
    let names = |prefix: &str, bytes: usize| -> Vec<String> {
        (0..bytes / 100)
            .map(|i| format!("{prefix}{i:0>99}"))
            .collect()
    };
    let mut too_large = Client::new("x", &["t"]);
    too_large.topics = names("x", 1_100);
    assert_eq!(
        group
            .heartbeat("g", too_large.request(), &catalog, &SETTINGS, now)
            .err(),
        Some(GroupError::InvalidRequest)
    );
    assert_eq!(
        group.state(),
        GroupState::Empty,
        "the refused member changed nothing"
    );

    let mut clients = Vec::new();
    for id in ["a", "b"] {
        let mut client = Client::new(id, &["t"]);
        client.topics = names(id, 1_000);
        client.beat(&mut group, &catalog, now);
        clients.push(client);
    }
    let mut third = Client::new("c", &["t"]);
    third.topics = names("c", 1_000);
    assert_eq!(
        group
            .heartbeat("g", third.request(), &catalog, &SETTINGS, now)
            .err(),
        Some(GroupError::GroupMaxSizeReached)
    );
    // A member's own subscription does not count against it; a small third one fits.
    clients[0].beat(&mut group, &catalog, now);
    third.topics = vec!["t".to_string()];
    third.beat(&mut group, &catalog, now);
}
