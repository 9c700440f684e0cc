use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::*;

/// Topics by name, with ids and partition counts; its version changes with every change.
#[derive(Default)]
struct Catalog {
    topics: BTreeMap<String, (Uuid, i32)>,
    version: u64,
}

impl Catalog {
    fn with(topics: &[(&str, i32)]) -> Catalog {
        let mut catalog = Catalog::default();
        for (name, partitions) in topics {
            catalog.set(name, *partitions);
        }
        catalog
    }

    fn set(&mut self, name: &str, partitions: i32) {
        let id = self
            .topics
            .get(name)
            .map_or_else(Uuid::new_v4, |(id, _)| *id);
        self.topics.insert(name.to_string(), (id, partitions));
        self.version += 1;
    }

    fn id(&self, name: &str) -> Uuid {
        self.topics[name].0
    }
}

impl TopicCatalog for Catalog {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        self.topics.get(name).copied()
    }
    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.topics
            .iter()
            .find(|(_, (t, _))| *t == id)
            .map(|(n, _)| n.clone())
    }
    fn topic_names(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }
    fn version(&self) -> u64 {
        self.version
    }
}

const SETTINGS: ShareGroupSettings = ShareGroupSettings {
    session_timeout_ms: 45_000,
    heartbeat_interval_ms: 5_000,
    max_size: 3,
};

fn join(member: &str, topics: &[&str]) -> ShareHeartbeat {
    ShareHeartbeat {
        member_id: member.to_string(),
        member_epoch: JOIN_EPOCH,
        topic_names: Some(topics.iter().map(|t| t.to_string()).collect()),
        client_id: "client".to_string(),
        client_host: "/127.0.0.1".to_string(),
        ..ShareHeartbeat::default()
    }
}

fn beat(member: &str, epoch: i32) -> ShareHeartbeat {
    ShareHeartbeat {
        member_id: member.to_string(),
        member_epoch: epoch,
        ..ShareHeartbeat::default()
    }
}

fn partitions(catalog: &Catalog, topic: &str, ps: &[i32]) -> TopicPartitions {
    TopicPartitions::from([(catalog.id(topic), ps.iter().copied().collect())])
}

struct Group {
    group: ShareGroup,
    catalog: Catalog,
    now: Instant,
}

impl Group {
    fn new(topics: &[(&str, i32)]) -> Group {
        Group {
            group: ShareGroup::new(&SETTINGS, 0),
            catalog: Catalog::with(topics),
            now: Instant::now(),
        }
    }

    fn send(&mut self, request: ShareHeartbeat) -> Result<ShareHeartbeatReply, GroupError> {
        self.group
            .heartbeat("g", request, &self.catalog, &SETTINGS, self.now, 0)
    }
}

#[test]
fn members_share_a_partition_and_take_their_targets_at_the_next_heartbeat() {
    let mut g = Group::new(&[("t", 1)]);
    let a = g.send(join("a", &["t"])).expect("joins");
    assert_eq!(a.assignment, Some(partitions(&g.catalog, "t", &[0])));
    assert_eq!(a.heartbeat_interval_ms, 5_000);
    assert_eq!(g.group.state(), GroupState::Stable);
    let b = g.send(join("b", &["t"])).expect("joins");
    assert_eq!(
        b.assignment,
        Some(partitions(&g.catalog, "t", &[0])),
        "shared"
    );
    assert!(b.member_epoch > a.member_epoch);
    // a learns of the new epoch at its next heartbeat; its partition did not change.
    let again = g.send(beat("a", a.member_epoch)).expect("heartbeat");
    assert_eq!(again.member_epoch, b.member_epoch);
    assert_eq!(again.assignment, None, "unchanged");
    let next = g.send(beat("a", again.member_epoch)).expect("heartbeat");
    assert_eq!(
        (next.member_epoch, next.assignment),
        (again.member_epoch, None)
    );
}

#[test]
fn partitions_go_round_robin_and_follow_members_and_topics() {
    let mut g = Group::new(&[("t", 3), ("u", 1)]);
    g.send(join("a", &["t", "u"])).expect("joins");
    let b = g.send(join("b", &["t"])).expect("joins");
    assert_eq!(b.assignment, Some(partitions(&g.catalog, "t", &[1])));
    let a = g.send(beat("a", 1)).expect("heartbeat");
    let mut expected = partitions(&g.catalog, "t", &[0, 2]);
    expected.extend(partitions(&g.catalog, "u", &[0]));
    assert_eq!(a.assignment, Some(expected));

    // The topic grows: the next heartbeat brings the new partition.
    g.catalog.set("t", 4);
    let b = g.send(beat("b", b.member_epoch)).expect("heartbeat");
    assert_eq!(b.assignment, Some(partitions(&g.catalog, "t", &[1, 3])));

    // b leaves: a takes every partition of t.
    let left = g.send(beat("b", -1)).expect("leaves");
    assert_eq!((left.member_epoch, left.heartbeat_interval_ms), (-1, 0));
    let a = g.send(beat("a", a.member_epoch)).expect("heartbeat");
    let mut expected = partitions(&g.catalog, "t", &[0, 1, 2, 3]);
    expected.extend(partitions(&g.catalog, "u", &[0]));
    assert_eq!(a.assignment, Some(expected));
}

#[test]
fn wrong_epochs_unknown_members_and_a_full_group_are_refused() {
    let mut g = Group::new(&[("t", 1)]);
    let a = g.send(join("a", &["t"])).expect("joins");
    assert_eq!(
        g.send(beat("a", a.member_epoch + 1)),
        Err(GroupError::FencedMemberEpoch)
    );
    assert_eq!(g.send(beat("x", 1)), Err(GroupError::UnknownMemberId));
    assert_eq!(g.send(beat("x", -1)), Err(GroupError::UnknownMemberId));
    // A member rejoining (epoch 0) is given its assignment again, at the same epoch.
    let again = g.send(join("a", &["t"])).expect("rejoins");
    assert_eq!(again.member_epoch, a.member_epoch);
    assert_eq!(again.assignment, a.assignment);
    g.send(join("b", &["t"])).expect("joins");
    let moved = g.send(beat("a", a.member_epoch)).expect("heartbeat");
    assert!(moved.member_epoch > a.member_epoch);
    assert_eq!(
        g.send(beat("a", a.member_epoch)),
        Err(GroupError::FencedMemberEpoch),
        "an older epoch"
    );
    g.send(join("c", &["t"])).expect("joins");
    assert_eq!(
        g.send(join("d", &["t"])),
        Err(GroupError::GroupMaxSizeReached)
    );
}

#[test]
fn a_member_that_stops_heartbeating_is_removed_after_its_session() {
    let mut g = Group::new(&[("t", 2)]);
    let a = g.send(join("a", &["t"])).expect("joins");
    g.now += Duration::from_secs(30);
    g.send(join("b", &["t"])).expect("joins");
    g.now += Duration::from_secs(16);
    assert_eq!(
        g.group.next_deadline(),
        Some(g.now - Duration::from_secs(1))
    );
    assert!(!g.group.tick("g", g.now, 46_000), "b is still there");
    assert_eq!(
        g.send(beat("a", a.member_epoch)),
        Err(GroupError::UnknownMemberId)
    );
    let description = g.group.describe();
    assert_eq!(description.members.len(), 1);
    g.now += Duration::from_secs(30);
    assert!(g.group.tick("g", g.now, 76_000), "emptied");
    assert_eq!(g.group.state(), GroupState::Empty);
    assert_eq!(g.group.state_since_ms(), 76_000);
}
