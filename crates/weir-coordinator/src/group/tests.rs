//! The classic group state machine, driven through [`Group`].

use tokio::sync::oneshot;

use super::*;
use crate::limits::MetadataBounds;

const SESSION_MS: i32 = 10_000;
const REBALANCE_MS: i32 = 30_000;

fn limits(initial_delay_ms: i32) -> GroupLimits {
    GroupLimits {
        session_timeout_min_ms: 1_000,
        session_timeout_max_ms: 100_000,
        initial_rebalance_delay_ms: initial_delay_ms,
        max_size: 3,
        metadata: MetadataBounds {
            member_max_bytes: 1_000,
            group_max_bytes: 2_500,
            coordinator_max_bytes: 10_000,
        },
    }
}

fn request(member_id: &str, protocols: &[&str]) -> JoinRequest {
    JoinRequest {
        member_id: member_id.to_string(),
        group_instance_id: None,
        client_id: "client".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: SESSION_MS,
        rebalance_timeout_ms: REBALANCE_MS,
        protocol_type: "consumer".into(),
        protocols: protocols
            .iter()
            .map(|p| (p.to_string(), Bytes::from(format!("{member_id}:{p}"))))
            .collect(),
        require_known_member_id: true,
    }
}

fn received<T>(rx: &mut oneshot::Receiver<T>) -> T {
    rx.try_recv().expect("answered")
}

fn waiting<T>(step: Step<T>) -> oneshot::Receiver<T> {
    match step {
        Step::Wait(rx) => rx,
        _ => panic!("expected to wait"),
    }
}

fn done<T>(step: Step<T>) -> T {
    match step {
        Step::Done(value) => value,
        _ => panic!("expected an immediate answer"),
    }
}

/// A new member's first join: MEMBER_ID_REQUIRED with an id, then the join with it.
fn join_new(
    group: &mut Group,
    limits: &GroupLimits,
    now: Instant,
) -> (String, oneshot::Receiver<JoinOutcome>) {
    let first = done(group.join(request("", &["range"]), limits, now, 0));
    assert_eq!(first.error, Some(GroupError::MemberIdRequired));
    assert!(first.member_id.starts_with("client-"));
    let rx = waiting(group.join(request(&first.member_id, &["range"]), limits, now, 0));
    (first.member_id, rx)
}

/// Leader syncs with `assignments`; the stored value completes the sync.
fn leader_syncs(
    group: &mut Group,
    leader: &str,
    assignments: Vec<(String, Bytes)>,
    now: Instant,
) -> oneshot::Receiver<SyncOutcome> {
    let generation = group.generation();
    let limits = limits(0);
    match group.sync(
        SyncRequest {
            member_id: leader,
            instance_id: None,
            generation,
            protocol_type: Some("consumer"),
            protocol_name: None,
            assignments,
        },
        &limits,
        now,
    ) {
        Step::Store(value, rx) => {
            group.finish_sync(generation, Ok(&value), now, 0);
            rx
        }
        _ => panic!("the leader's sync stores the assignment"),
    }
}

/// A Stable group whose only member (returned) joined and synced at `now`.
fn stable_group_of_one() -> (GroupLimits, Instant, Group, String) {
    let limits = limits(0);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    let (a, mut a_join) = join_new(&mut group, &limits, now);
    received(&mut a_join);
    received(&mut leader_syncs(&mut group, &a, Vec::new(), now)).expect("synced");
    (limits, now, group, a)
}

#[test]
fn two_members_join_sync_and_rebalance_when_a_third_arrives() {
    let limits = limits(0);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    let (a, mut a_join) = join_new(&mut group, &limits, now);
    let joined = received(&mut a_join);
    assert_eq!((joined.generation, joined.leader.as_str()), (1, a.as_str()));
    assert_eq!(joined.members.len(), 1);
    let mut a_sync = leader_syncs(
        &mut group,
        &a,
        vec![(a.clone(), Bytes::from_static(b"all"))],
        now,
    );
    assert_eq!(
        received(&mut a_sync).expect("assigned").assignment,
        Bytes::from_static(b"all")
    );
    assert_eq!(group.state(), GroupState::Stable);

    let (b, mut b_join) = join_new(&mut group, &limits, now);
    assert_eq!(group.state(), GroupState::PreparingRebalance);
    assert!(b_join.try_recv().is_err(), "waits for the leader to rejoin");
    assert_eq!(
        group.heartbeat(&a, None, 1, now),
        Err(GroupError::RebalanceInProgress)
    );
    let mut a_join = waiting(group.join(request(&a, &["range"]), &limits, now, 0));
    let (a_joined, b_joined) = (received(&mut a_join), received(&mut b_join));
    assert_eq!((a_joined.generation, b_joined.generation), (2, 2));
    assert_eq!(a_joined.leader, a);
    assert_eq!(a_joined.members.len(), 2, "the leader sees every member");
    assert!(b_joined.members.is_empty(), "followers see none");

    let mut b_sync = waiting(group.sync(
        SyncRequest {
            member_id: &b,
            instance_id: None,
            generation: 2,
            protocol_type: None,
            protocol_name: None,
            assignments: Vec::new(),
        },
        &limits,
        now,
    ));
    assert!(
        b_sync.try_recv().is_err(),
        "a follower waits for the leader's assignment"
    );
    let assignments = vec![
        (a.clone(), Bytes::from_static(b"0")),
        (b.clone(), Bytes::from_static(b"1")),
    ];
    let mut a_sync = leader_syncs(&mut group, &a, assignments, now);
    assert_eq!(
        received(&mut a_sync).expect("a").assignment,
        Bytes::from_static(b"0")
    );
    assert_eq!(
        received(&mut b_sync).expect("b").assignment,
        Bytes::from_static(b"1")
    );
    assert_eq!(group.heartbeat(&b, None, 2, now), Ok(()));
    assert_eq!(
        group.heartbeat(&b, None, 1, now),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        group.heartbeat("stranger", None, 2, now),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn a_member_whose_session_expires_is_removed_and_the_last_leaves_the_group_empty() {
    let (_, now, mut group, _) = stable_group_of_one();
    let session = Duration::from_millis(SESSION_MS as u64);
    assert!(!group.tick(now + session - Duration::from_millis(1), 0));
    assert_eq!(group.state(), GroupState::Stable);
    assert_eq!(group.next_deadline(), Some(now + session));
    assert!(group.tick(now + session, 0), "the group became empty");
    assert_eq!(group.state(), GroupState::Empty);
    assert_eq!(group.generation(), 2);
    assert_eq!(
        group.check_commit(-1, "", None, 9),
        Ok(()),
        "an empty group takes simple commits"
    );
}

#[test]
fn a_rebalance_past_its_deadline_drops_members_that_did_not_rejoin() {
    let (limits, now, mut group, a) = stable_group_of_one();
    let (b, mut b_join) = join_new(&mut group, &limits, now);
    // a keeps heartbeating (told to rejoin) but never rejoins.
    let later = now + Duration::from_millis(REBALANCE_MS as u64);
    assert_eq!(
        group.heartbeat(&a, None, 1, later),
        Err(GroupError::RebalanceInProgress)
    );
    group.tick(later, 0);
    let joined = received(&mut b_join);
    assert_eq!((joined.generation, joined.leader.as_str()), (2, b.as_str()));
    assert_eq!(
        group.heartbeat(&a, None, 2, later),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn commits_are_checked_against_membership_and_generation() {
    let limits = limits(0);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    let (a, mut a_join) = join_new(&mut group, &limits, now);
    received(&mut a_join);
    assert_eq!(
        group.check_commit(1, &a, None, 9),
        Err(GroupError::RebalanceInProgress),
        "waiting for the assignment"
    );
    received(&mut leader_syncs(&mut group, &a, Vec::new(), now)).expect("synced");
    assert_eq!(group.check_commit(1, &a, None, 9), Ok(()));
    assert_eq!(
        group.check_commit(0, &a, None, 9),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        group.check_commit(1, "other", None, 9),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(
        group.check_commit(-1, "", None, 9),
        Err(GroupError::UnknownMemberId),
        "a simple commit into an active group"
    );
}

#[test]
fn the_protocol_is_the_common_one_most_members_prefer() {
    let limits = limits(0);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    let mut no_id = request("", &["range", "roundrobin"]);
    no_id.require_known_member_id = false;
    let mut a = waiting(group.join(no_id, &limits, now, 0));
    let a_id = received(&mut a).member_id;
    received(&mut leader_syncs(&mut group, &a_id, Vec::new(), now)).expect("synced");
    let mut b = request("", &["roundrobin", "range"]);
    b.require_known_member_id = false;
    let mut b_rx = waiting(group.join(b, &limits, now, 0));
    let mut c = request("", &["roundrobin", "sticky"]);
    c.require_known_member_id = false;
    let mut c_rx = waiting(group.join(c, &limits, now, 0));
    let mut a = waiting(group.join(request(&a_id, &["range", "roundrobin"]), &limits, now, 0));
    for rx in [&mut a, &mut b_rx, &mut c_rx] {
        assert_eq!(received(rx).protocol_name.as_deref(), Some("roundrobin"));
    }
    let mut d = request("", &["sticky"]);
    d.require_known_member_id = false;
    let refused = done(group.join(d, &limits, now, 0));
    assert_eq!(refused.error, Some(GroupError::InconsistentGroupProtocol));
    let mut e = request("", &["roundrobin"]);
    e.require_known_member_id = false;
    assert_eq!(
        done(group.join(e, &limits, now, 0)).error,
        Some(GroupError::GroupMaxSizeReached)
    );
}

#[test]
fn a_static_member_rejoining_a_stable_group_takes_its_place_without_a_rebalance() {
    let limits = limits(0);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    let mut first = request("", &["range"]);
    first.group_instance_id = Some("i1".into());
    let mut rx = waiting(group.join(first.clone(), &limits, now, 0));
    let old = received(&mut rx).member_id;
    assert!(old.starts_with("i1-"));
    received(&mut leader_syncs(
        &mut group,
        &old,
        vec![(old.clone(), Bytes::from_static(b"p0"))],
        now,
    ))
    .expect("synced");
    let again = done(group.join(first, &limits, now, 0));
    assert_eq!(again.error, None);
    assert_ne!(again.member_id, old);
    assert_eq!(again.generation, 1, "no rebalance");
    assert_eq!(
        again.leader, old,
        "the old leader id, so the member does not reassign"
    );
    assert_eq!(group.state(), GroupState::Stable);
    assert_eq!(
        group.heartbeat(&old, Some("i1"), 1, now),
        Err(GroupError::FencedInstanceId)
    );
    let synced = done(group.sync(
        SyncRequest {
            member_id: &again.member_id,
            instance_id: Some("i1"),
            generation: 1,
            protocol_type: None,
            protocol_name: None,
            assignments: Vec::new(),
        },
        &limits,
        now,
    ));
    assert_eq!(synced.expect("kept").assignment, Bytes::from_static(b"p0"));
}

#[test]
fn the_first_rebalance_waits_out_the_initial_delay_for_more_members() {
    let limits = limits(3_000);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    let (_, mut a) = join_new(&mut group, &limits, now);
    assert!(a.try_recv().is_err());
    let (_, mut b) = join_new(&mut group, &limits, now + Duration::from_millis(2_000));
    group.tick(now + Duration::from_millis(3_500), 0);
    assert!(
        a.try_recv().is_err(),
        "the second member extended the delay"
    );
    group.tick(now + Duration::from_millis(5_000), 0);
    assert_eq!(received(&mut a).generation, 1);
    assert_eq!(received(&mut b).generation, 1);
}

#[test]
fn leaving_rebalances_the_rest_and_unknown_members_are_refused() {
    let (limits, now, mut group, a) = stable_group_of_one();
    assert_eq!(
        group.leave("nobody", None, now, 0),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(group.leave(&a, None, now, 0), Ok(true));
    assert_eq!(group.state(), GroupState::Empty);
    assert!(group.has_no_members());
    let refused = done(group.join(request("", &["range"]), &limits, now, 0));
    assert_eq!(refused.error, Some(GroupError::MemberIdRequired));
    let mut timeout = request("x", &["range"]);
    timeout.session_timeout_ms = 10;
    assert_eq!(
        done(group.join(timeout, &limits, now, 0)).error,
        Some(GroupError::InvalidSessionTimeout)
    );
}

/// `request` from `member_id` with one `range` protocol whose metadata is `bytes` long.
fn request_of_size(member_id: &str, bytes: usize) -> JoinRequest {
    JoinRequest {
        protocols: vec![("range".to_string(), Bytes::from(vec![7u8; bytes]))],
        ..request(member_id, &[])
    }
}

#[test]
fn a_member_whose_metadata_is_over_its_bound_is_refused_and_changes_nothing() {
    let (limits, now, mut group, a) = stable_group_of_one();
    let too_large = limits.metadata.member_max_bytes - "range".len() + 1;
    for member_id in ["", a.as_str()] {
        let refused = done(group.join(request_of_size(member_id, too_large), &limits, now, 0));
        assert_eq!(refused.error, Some(GroupError::InvalidRequest));
    }
    assert_eq!(group.state(), GroupState::Stable);
    assert_eq!(group.generation(), 1);
    let fits = limits.metadata.member_max_bytes - "range".len();
    let mut joined = waiting(group.join(request_of_size(&a, fits), &limits, now, 0));
    assert_eq!(
        received(&mut joined).generation,
        2,
        "the join within the bound rebalanced"
    );
}

#[test]
fn a_join_over_the_groups_metadata_bound_is_refused_but_members_may_rejoin() {
    let limits = limits(0);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    // Two members of 1,000 bytes each fill 2,000 of the group's 2,500.
    let mut members = Vec::new();
    for _ in 0..2 {
        let id = done(group.join(request("", &["range"]), &limits, now, 0)).member_id;
        waiting(group.join(request_of_size(&id, 995), &limits, now, 0));
        members.push(id);
    }
    let third = done(group.join(request("", &["range"]), &limits, now, 0)).member_id;
    let refused = done(group.join(request_of_size(&third, 995), &limits, now, 0));
    assert_eq!(refused.error, Some(GroupError::GroupMaxSizeReached));
    // Its own bytes do not count against a member that rejoins.
    waiting(group.join(request_of_size(&members[0], 995), &limits, now, 0));
    // Within what is left, a third member fits.
    waiting(group.join(request_of_size(&third, 400), &limits, now, 0));
}

#[test]
fn a_leaders_assignment_over_the_bounds_is_refused() {
    let limits = limits(0);
    let now = Instant::now();
    let mut group = Group::new("g".into());
    let (a, mut a_join) = join_new(&mut group, &limits, now);
    received(&mut a_join);
    let sync = |assignment: usize| SyncRequest {
        member_id: &a,
        instance_id: None,
        generation: 1,
        protocol_type: None,
        protocol_name: None,
        assignments: vec![(a.clone(), Bytes::from(vec![0u8; assignment]))],
    };
    let over_member = limits.metadata.member_max_bytes + 1;
    assert_eq!(
        done(group.sync(sync(over_member), &limits, now)).err(),
        Some(GroupError::InvalidRequest)
    );
    assert_eq!(group.state(), GroupState::CompletingRebalance);
    match group.sync(sync(limits.metadata.member_max_bytes), &limits, now) {
        Step::Store(value, _) => assert_eq!(
            value.members[0].assignment.len(),
            limits.metadata.member_max_bytes
        ),
        _ => panic!("the leader's sync within the bound stores the assignment"),
    }
}
