//! A group under the classic protocol: its members, generations and the rebalance state
//! machine (Empty → PreparingRebalance → CompletingRebalance → Stable), as Kafka's classic
//! group coordinator runs it.
//!
//! Synchronous and clock-free: callers pass the time. Waiting members hold a `oneshot`
//! sender: a JoinGroup or SyncGroup request is answered by sending on it, from whichever call
//! completes the step.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::limits::{millis, GroupLimits};
use crate::records::{GroupValue, StoredMember};
use crate::state::GroupState;
use crate::GroupError;

/// What a JoinGroup asks for, decoded by the handler.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    /// The member id the client holds, or empty on its first join.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Session timeout.
    pub session_timeout_ms: i32,
    /// Rebalance timeout (v0: the session timeout).
    pub rebalance_timeout_ms: i32,
    /// `consumer`, `connect`, …
    pub protocol_type: String,
    /// Supported protocols (assignors) in preference order, with their metadata.
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a new dynamic member first gets its id with MEMBER_ID_REQUIRED (KIP-394).
    pub require_known_member_id: bool,
}

/// A member as the leader sees it in the JoinGroup response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// Its metadata for the chosen protocol.
    pub metadata: Bytes,
}

/// The answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinOutcome {
    /// Why the join failed, if it did. MEMBER_ID_REQUIRED carries the new member id.
    pub error: Option<GroupError>,
    /// Generation of the completed rebalance, or -1.
    pub generation: i32,
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The chosen protocol.
    pub protocol_name: Option<String>,
    /// The leader's member id.
    pub leader: String,
    /// This member's id.
    pub member_id: String,
    /// Every member with its metadata: filled only for the leader.
    pub members: Vec<JoinedMember>,
}

impl JoinOutcome {
    /// A failed join: no generation, no members.
    pub(crate) fn failed(error: GroupError, member_id: &str) -> JoinOutcome {
        JoinOutcome {
            error: Some(error),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
        }
    }
}

/// What a SyncGroup asks for, decoded by the handler.
#[derive(Debug, Clone)]
pub struct SyncRequest<'a> {
    /// The member's id.
    pub member_id: &'a str,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<&'a str>,
    /// The generation the member joined.
    pub generation: i32,
    /// Protocol type the member expects (v5+), checked against the group's.
    pub protocol_type: Option<&'a str>,
    /// Protocol the member expects (v5+), checked against the group's.
    pub protocol_name: Option<&'a str>,
    /// The leader's assignment per member id (empty from followers).
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup: the member's assignment, or why there is none.
pub type SyncOutcome = Result<SyncAssignment, GroupError>;

/// A member's assignment with the protocol it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncAssignment {
    /// The group's protocol type.
    pub protocol_type: Option<String>,
    /// The chosen protocol.
    pub protocol_name: Option<String>,
    /// The assignment bytes, opaque to the coordinator.
    pub assignment: Bytes,
}

/// What the coordinator does after a JoinGroup or SyncGroup reached the group.
pub enum Step<T> {
    /// Answer now.
    Done(T),
    /// Answer when the group completes the step.
    Wait(oneshot::Receiver<T>),
    /// Store the group's new metadata, then call [`ClassicGroup::finish_sync`]; the answer follows on
    /// the receiver.
    Store(GroupValue, oneshot::Receiver<T>),
}

/// One member of a group.
#[derive(Debug)]
struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocol_type: String,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    /// Session expiry: pushed forward by heartbeats, joins and syncs.
    expires: Instant,
    join_waiter: Option<oneshot::Sender<JoinOutcome>>,
    sync_waiter: Option<oneshot::Sender<SyncOutcome>>,
    /// Sent a SyncGroup in the current generation.
    synced: bool,
}

impl Member {
    fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(name, _)| name == protocol)
    }

    /// Bytes this member's protocols and assignment hold.
    fn metadata_bytes(&self) -> usize {
        protocols_bytes(&self.protocols) + self.assignment.len()
    }
}

/// The bytes a join adds to what a group of `members` holds (its protocols, less what the
/// member it replaces held), or why the group's bounds refuse it: the error, what it says, the
/// bound.
fn join_bytes(
    members: &[Member],
    request: &JoinRequest,
    limits: &GroupLimits,
) -> Result<usize, (GroupError, &'static str, usize)> {
    let joining = protocols_bytes(&request.protocols);
    if joining > limits.metadata.member_max_bytes {
        return Err((
            GroupError::InvalidRequest,
            "the member's protocol metadata is over group.member.metadata.max.bytes",
            limits.metadata.member_max_bytes,
        ));
    }
    let (replaced, others): (Vec<&Member>, Vec<&Member>) = members.iter().partition(|m| {
        m.id == request.member_id
            || (request.group_instance_id.is_some() && m.instance_id == request.group_instance_id)
    });
    let others: usize = others.into_iter().map(Member::metadata_bytes).sum();
    if others + joining > limits.metadata.group_max_bytes {
        return Err((
            GroupError::GroupMaxSizeReached,
            "the group's members' metadata would be over group.metadata.max.bytes",
            limits.metadata.group_max_bytes,
        ));
    }
    let held: usize = replaced.into_iter().map(Member::metadata_bytes).sum();
    Ok(joining.saturating_sub(held))
}

/// A member's protocols over `group.member.metadata.max.bytes` are INVALID_REQUEST; a join that
/// would take the group's protocols and assignments over `group.metadata.max.bytes` is
/// GROUP_MAX_SIZE_REACHED. The bytes of the member it replaces (the same member id, or the
/// same static instance) do not count. Either refusal is logged with the figures, since
/// JoinGroup has no error message.
fn check_join_bytes(
    members: &[Member],
    group_id: &str,
    request: &JoinRequest,
    limits: &GroupLimits,
) -> Result<(), GroupError> {
    let Err((error, what, limit)) = join_bytes(members, request, limits) else {
        return Ok(());
    };
    tracing::warn!(
        target: "weir::groups",
        group = %group_id,
        client_id = %request.client_id,
        client_host = %request.client_host,
        bytes = protocols_bytes(&request.protocols),
        limit,
        "JoinGroup refused ({error}): {what}"
    );
    Err(error)
}

/// Bytes a member's protocols take: their names and metadata.
fn protocols_bytes(protocols: &[(String, Bytes)]) -> usize {
    protocols
        .iter()
        .map(|(name, metadata)| name.len() + metadata.len())
        .sum()
}

/// A member id handed out with MEMBER_ID_REQUIRED, waiting for the client to join with it.
#[derive(Debug)]
struct PendingMember {
    id: String,
    expires: Instant,
}

/// The membership of a classic group.
#[derive(Debug)]
pub struct ClassicGroup {
    state: GroupState,
    protocol_type: Option<String>,
    protocol: Option<String>,
    generation: i32,
    leader: Option<String>,
    /// Members in the order they joined (the first becomes leader).
    members: Vec<Member>,
    pending: Vec<PendingMember>,
    /// PreparingRebalance: when members that have not rejoined are dropped.
    rebalance_deadline: Option<Instant>,
    /// PreparingRebalance of a group that was empty: completion waits until then for more
    /// members (`group.initial.rebalance.delay.ms`), never past `rebalance_deadline`.
    initial_delay_until: Option<Instant>,
    /// CompletingRebalance: when members that have not sent SyncGroup are dropped.
    sync_deadline: Option<Instant>,
    /// When the state last changed, ms since the epoch.
    state_since_ms: i64,
    /// `group.initial.rebalance.delay.ms`.
    initial_delay: Duration,
}

impl ClassicGroup {
    /// A new classic group without members, Empty since `now_ms`.
    pub fn new(limits: &GroupLimits, now_ms: i64) -> ClassicGroup {
        ClassicGroup {
            state: GroupState::Empty,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: Vec::new(),
            pending: Vec::new(),
            rebalance_deadline: None,
            initial_delay_until: None,
            sync_deadline: None,
            state_since_ms: now_ms,
            initial_delay: millis(limits.initial_rebalance_delay_ms),
        }
    }

    /// Rebuilds a group from its stored metadata (on load). The members are kept, their
    /// sessions starting now; the group is Stable with its stored assignment, or Empty.
    pub fn restore(value: GroupValue, limits: &GroupLimits, now: Instant) -> ClassicGroup {
        let protocol_type = Some(value.protocol_type).filter(|t| !t.is_empty());
        let protocol = value.protocol;
        let members: Vec<Member> = value
            .members
            .into_iter()
            .map(|m| {
                let session_timeout = millis(m.session_timeout_ms);
                Member {
                    protocols: vec![(protocol.clone().unwrap_or_default(), m.subscription)],
                    id: m.member_id,
                    instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout,
                    rebalance_timeout: millis(m.rebalance_timeout_ms),
                    protocol_type: protocol_type.clone().unwrap_or_default(),
                    assignment: m.assignment,
                    expires: now + session_timeout,
                    join_waiter: None,
                    sync_waiter: None,
                    synced: true,
                }
            })
            .collect();
        ClassicGroup {
            state: if members.is_empty() {
                GroupState::Empty
            } else {
                GroupState::Stable
            },
            protocol_type,
            protocol,
            generation: value.generation,
            leader: value.leader,
            members,
            pending: Vec::new(),
            rebalance_deadline: None,
            initial_delay_until: None,
            sync_deadline: None,
            state_since_ms: value.current_state_timestamp,
            initial_delay: millis(limits.initial_rebalance_delay_ms),
        }
    }

    /// The group's state.
    pub fn state(&self) -> GroupState {
        self.state
    }

    /// The generation of the last completed rebalance.
    pub fn generation(&self) -> i32 {
        self.generation
    }

    /// When the group last changed state (ms since the epoch): for an Empty group, when it
    /// became empty.
    pub fn state_since_ms(&self) -> i64 {
        self.state_since_ms
    }

    /// The protocol type (`consumer` for Kafka consumers), once a member has joined.
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }

    /// The chosen protocol (assignor).
    pub fn protocol(&self) -> Option<&str> {
        self.protocol.as_deref()
    }

    /// The longest rebalance timeout of the members: how long a rebalance waits for them.
    pub fn rebalance_timeout(&self) -> Duration {
        self.members
            .iter()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default()
    }

    /// True when the group has neither members nor pending joins.
    pub fn has_no_members(&self) -> bool {
        self.members.is_empty() && self.pending.is_empty()
    }

    /// Bytes of member metadata the group holds: its members' protocols and assignments.
    pub fn metadata_bytes(&self) -> usize {
        self.members.iter().map(Member::metadata_bytes).sum()
    }

    /// What DescribeGroups shows of each member: id, instance id, client id, host, metadata
    /// for the chosen protocol, assignment.
    pub fn describe_members(&self) -> Vec<MemberDescription> {
        let protocol = self.protocol.as_deref().unwrap_or_default();
        self.members
            .iter()
            .map(|m| MemberDescription {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                metadata: m.metadata_for(protocol),
                assignment: m.assignment.clone(),
            })
            .collect()
    }

    /// The group's metadata as stored after a rebalance.
    pub fn stored_value(&self) -> GroupValue {
        let protocol = self.protocol.as_deref().unwrap_or_default();
        GroupValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp: self.state_since_ms,
            members: self
                .members
                .iter()
                .map(|m| StoredMember {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: duration_ms(m.rebalance_timeout),
                    session_timeout_ms: duration_ms(m.session_timeout),
                    subscription: m.metadata_for(protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    fn set_state(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_since_ms = now_ms;
    }

    fn member_index(&self, member_id: &str) -> Option<usize> {
        self.members.iter().position(|m| m.id == member_id)
    }

    fn static_member_index(&self, instance_id: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.instance_id.as_deref() == Some(instance_id))
    }

    /// Checks a request's member against the group: a static member's instance id must map to
    /// that member id (else FENCED_INSTANCE_ID), a member id must be known.
    fn known_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<usize, GroupError> {
        if let Some(instance) = instance_id {
            if let Some(index) = self.static_member_index(instance) {
                if self.members[index].id != member_id {
                    return Err(GroupError::FencedInstanceId);
                }
                return Ok(index);
            }
        }
        self.member_index(member_id)
            .ok_or(GroupError::UnknownMemberId)
    }

    /// Checks a JoinGroup before it reaches a group: the session timeout's range, a protocol
    /// type and protocols, and the metadata bounds of `group` (`None`: one without classic
    /// members). A refusal changes nothing.
    pub fn check_join(
        group: Option<&ClassicGroup>,
        group_id: &str,
        request: &JoinRequest,
        limits: &GroupLimits,
    ) -> Result<(), GroupError> {
        if request.session_timeout_ms < limits.session_timeout_min_ms
            || request.session_timeout_ms > limits.session_timeout_max_ms
        {
            return Err(GroupError::InvalidSessionTimeout);
        }
        if request.protocol_type.is_empty() || request.protocols.is_empty() {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        check_join_bytes(
            group.map_or(&[][..], |g| &g.members),
            group_id,
            request,
            limits,
        )
    }

    /// Handles a JoinGroup that passed [`ClassicGroup::check_join`] (Kafka's classic-protocol
    /// rules; see the module docs).
    pub fn join(
        &mut self,
        request: JoinRequest,
        limits: &GroupLimits,
        now: Instant,
        now_ms: i64,
    ) -> Step<JoinOutcome> {
        let done = |error: GroupError| Step::Done(JoinOutcome::failed(error, &request.member_id));
        if !self.members.is_empty() && !self.accepts_protocols(&request) {
            return done(GroupError::InconsistentGroupProtocol);
        }
        if request.member_id.is_empty() {
            return self.join_new_member(request, limits, now, now_ms);
        }
        if let Some(position) = self.pending.iter().position(|p| p.id == request.member_id) {
            if self.members.len() >= limits.max_size {
                return done(GroupError::GroupMaxSizeReached);
            }
            self.pending.remove(position);
            let member_id = request.member_id.clone();
            return self.add_member_and_rebalance(member_id, request, now, now_ms);
        }
        let index =
            match self.known_member(&request.member_id, request.group_instance_id.as_deref()) {
                Ok(index) => index,
                Err(error) => return done(error),
            };
        self.rejoin(index, request, now, now_ms)
    }

    /// The bytes a join would add to what `group` holds (`None`: a group without classic
    /// members), or `None` when the group's own bounds refuse it (then it adds nothing).
    pub fn join_adds_bytes(
        group: Option<&ClassicGroup>,
        request: &JoinRequest,
        limits: &GroupLimits,
    ) -> Option<usize> {
        join_bytes(group.map_or(&[][..], |g| &g.members), request, limits).ok()
    }

    /// Same protocol type as the group, and one protocol every member (with this one) supports.
    fn accepts_protocols(&self, request: &JoinRequest) -> bool {
        if self
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != request.protocol_type)
        {
            return false;
        }
        request.protocols.iter().any(|(name, _)| {
            self.members
                .iter()
                .filter(|m| m.id != request.member_id)
                .all(|m| m.supports(name))
        })
    }

    fn join_new_member(
        &mut self,
        request: JoinRequest,
        limits: &GroupLimits,
        now: Instant,
        now_ms: i64,
    ) -> Step<JoinOutcome> {
        let prefix = request
            .group_instance_id
            .clone()
            .unwrap_or_else(|| request.client_id.clone());
        let member_id = format!("{prefix}-{}", uuid::Uuid::new_v4());
        if let Some(instance) = request.group_instance_id.clone() {
            if let Some(index) = self.static_member_index(&instance) {
                return self.replace_static_member(index, member_id, request, now, now_ms);
            }
        } else if request.require_known_member_id {
            if self.members.len() + self.pending.len() >= limits.max_size {
                return Step::Done(JoinOutcome::failed(GroupError::GroupMaxSizeReached, ""));
            }
            self.pending.push(PendingMember {
                id: member_id.clone(),
                expires: now + millis(request.session_timeout_ms),
            });
            return Step::Done(JoinOutcome::failed(
                GroupError::MemberIdRequired,
                &member_id,
            ));
        }
        if self.members.len() >= limits.max_size {
            return Step::Done(JoinOutcome::failed(GroupError::GroupMaxSizeReached, ""));
        }
        self.add_member_and_rebalance(member_id, request, now, now_ms)
    }

    fn add_member_and_rebalance(
        &mut self,
        member_id: String,
        request: JoinRequest,
        now: Instant,
        now_ms: i64,
    ) -> Step<JoinOutcome> {
        let (tx, rx) = oneshot::channel();
        let session_timeout = millis(request.session_timeout_ms);
        let was_empty = self.members.is_empty();
        self.protocol_type
            .get_or_insert_with(|| request.protocol_type.clone());
        self.members.push(Member {
            id: member_id,
            instance_id: request.group_instance_id,
            client_id: request.client_id,
            client_host: request.client_host,
            session_timeout,
            rebalance_timeout: millis(request.rebalance_timeout_ms),
            protocol_type: request.protocol_type,
            protocols: request.protocols,
            assignment: Bytes::new(),
            expires: now + session_timeout,
            join_waiter: Some(tx),
            sync_waiter: None,
            synced: false,
        });
        if self.state == GroupState::PreparingRebalance {
            if let Some(until) = self.initial_delay_until {
                // Another member arrived during the initial delay: wait a little longer for
                // the rest, never past the rebalance deadline.
                let extended = now + self.initial_delay;
                self.initial_delay_until =
                    Some(extended.min(self.rebalance_deadline.unwrap_or(until)));
            }
        } else {
            self.prepare_rebalance(was_empty, now, now_ms);
        }
        self.try_complete_join(now, now_ms);
        Step::Wait(rx)
    }

    /// A static member rejoining with a new member id: the old id is fenced; in a Stable group
    /// whose protocol would not change, no rebalance happens (KIP-345).
    fn replace_static_member(
        &mut self,
        index: usize,
        new_id: String,
        request: JoinRequest,
        now: Instant,
        now_ms: i64,
    ) -> Step<JoinOutcome> {
        let old_leader = self.leader.clone().unwrap_or_default();
        let member = &mut self.members[index];
        if let Some(waiter) = member.join_waiter.take() {
            let _ = waiter.send(JoinOutcome::failed(
                GroupError::FencedInstanceId,
                &member.id,
            ));
        }
        if let Some(waiter) = member.sync_waiter.take() {
            let _ = waiter.send(Err(GroupError::FencedInstanceId));
        }
        if self.leader.as_deref() == Some(member.id.as_str()) {
            self.leader = Some(new_id.clone());
        }
        member.id = new_id.clone();
        member.client_id = request.client_id.clone();
        member.client_host = request.client_host.clone();
        member.session_timeout = millis(request.session_timeout_ms);
        member.rebalance_timeout = millis(request.rebalance_timeout_ms);
        member.expires = now + member.session_timeout;
        let unchanged = member.protocols == request.protocols;
        member.protocols = request.protocols.clone();
        match self.state {
            GroupState::Stable if unchanged => Step::Done(JoinOutcome {
                error: None,
                generation: self.generation,
                protocol_type: self.protocol_type.clone(),
                protocol_name: self.protocol.clone(),
                // The old leader id: the rejoining member must not think it leads and
                // reassign a Stable group.
                leader: old_leader,
                member_id: new_id,
                members: Vec::new(),
            }),
            _ => self.rejoin(index, request, now, now_ms),
        }
    }

    fn rejoin(
        &mut self,
        index: usize,
        request: JoinRequest,
        now: Instant,
        now_ms: i64,
    ) -> Step<JoinOutcome> {
        let is_leader = self.leader.as_deref() == Some(request.member_id.as_str());
        let member = &mut self.members[index];
        let unchanged = member.protocols == request.protocols;
        member.session_timeout = millis(request.session_timeout_ms);
        member.rebalance_timeout = millis(request.rebalance_timeout_ms);
        member.expires = now + member.session_timeout;
        member.protocols = request.protocols;
        member.protocol_type = request.protocol_type;
        match self.state {
            GroupState::CompletingRebalance if unchanged => {
                // The member missed the join response: send it again.
                Step::Done(self.join_outcome(index))
            }
            GroupState::Stable if unchanged && !is_leader => Step::Done(self.join_outcome(index)),
            GroupState::Empty => Step::Done(JoinOutcome::failed(
                GroupError::UnknownMemberId,
                &self.members[index].id,
            )),
            _ => {
                let (tx, rx) = oneshot::channel();
                if let Some(old) = self.members[index].join_waiter.replace(tx) {
                    let _ = old.send(JoinOutcome::failed(
                        GroupError::UnknownMemberId,
                        &self.members[index].id,
                    ));
                }
                if self.state != GroupState::PreparingRebalance {
                    self.prepare_rebalance(false, now, now_ms);
                }
                self.try_complete_join(now, now_ms);
                Step::Wait(rx)
            }
        }
    }

    /// Starts a rebalance: sync waiters of an unfinished one are told to rejoin, and members
    /// get until the largest rebalance timeout to join.
    fn prepare_rebalance(&mut self, from_empty: bool, now: Instant, now_ms: i64) {
        if self.state == GroupState::CompletingRebalance {
            for member in &mut self.members {
                member.assignment = Bytes::new();
                if let Some(waiter) = member.sync_waiter.take() {
                    let _ = waiter.send(Err(GroupError::RebalanceInProgress));
                }
            }
        }
        let timeout = self.rebalance_timeout();
        self.rebalance_deadline = Some(now + timeout);
        self.initial_delay_until = (from_empty && !self.initial_delay.is_zero())
            .then(|| (now + self.initial_delay).min(now + timeout));
        self.sync_deadline = None;
        self.set_state(GroupState::PreparingRebalance, now_ms);
    }

    /// Completes the join phase when every member has rejoined (and the initial delay is
    /// over), or when the rebalance deadline passed: members that did not rejoin are removed.
    /// Returns true when the group became Empty (its metadata should be stored).
    fn try_complete_join(&mut self, now: Instant, now_ms: i64) -> bool {
        if self.state != GroupState::PreparingRebalance {
            return false;
        }
        let expired = self.rebalance_deadline.is_some_and(|d| now >= d);
        let delaying = self.initial_delay_until.is_some_and(|d| now < d);
        let all_joined =
            self.pending.is_empty() && self.members.iter().all(|m| m.join_waiter.is_some());
        if !expired && (delaying || !all_joined) {
            return false;
        }
        if expired {
            self.pending.clear();
            self.members.retain(|m| m.join_waiter.is_some());
        }
        self.complete_join(now, now_ms)
    }

    fn complete_join(&mut self, now: Instant, now_ms: i64) -> bool {
        self.generation = self.generation.wrapping_add(1).max(1);
        self.rebalance_deadline = None;
        self.initial_delay_until = None;
        if self.members.is_empty() {
            self.protocol = None;
            self.leader = None;
            self.set_state(GroupState::Empty, now_ms);
            return true;
        }
        self.protocol = self.select_protocol();
        if !self
            .leader
            .as_deref()
            .is_some_and(|l| self.members.iter().any(|m| m.id == l))
        {
            self.leader = Some(self.members[0].id.clone());
        }
        self.set_state(GroupState::CompletingRebalance, now_ms);
        self.sync_deadline = Some(now + self.rebalance_timeout());
        for index in 0..self.members.len() {
            let outcome = self.join_outcome(index);
            let member = &mut self.members[index];
            member.synced = false;
            member.expires = now + member.session_timeout;
            if let Some(waiter) = member.join_waiter.take() {
                let _ = waiter.send(outcome);
            }
        }
        false
    }

    /// The protocol every member supports with the most first-choice votes (ties: the
    /// earliest member's preference).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.first()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| self.members.iter().all(|m| m.supports(name)))
            .collect();
        let mut best: Option<(&str, usize)> = None;
        for candidate in &candidates {
            let votes = self
                .members
                .iter()
                .filter(|m| {
                    m.protocols
                        .iter()
                        .map(|(name, _)| name.as_str())
                        .find(|name| candidates.contains(name))
                        == Some(candidate)
                })
                .count();
            if best.is_none_or(|(_, most)| votes > most) {
                best = Some((candidate, votes));
            }
        }
        best.map(|(name, _)| name.to_string())
    }

    fn join_outcome(&self, index: usize) -> JoinOutcome {
        let member = &self.members[index];
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.as_deref().unwrap_or_default();
        let members = if leader == member.id {
            self.members
                .iter()
                .map(|m| JoinedMember {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    metadata: m.metadata_for(protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinOutcome {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            leader,
            member_id: member.id.clone(),
            members,
        }
    }

    /// Handles a SyncGroup. The leader's assignment is stored before anyone gets theirs.
    pub fn sync(
        &mut self,
        group_id: &str,
        request: SyncRequest<'_>,
        limits: &GroupLimits,
        now: Instant,
    ) -> Step<SyncOutcome> {
        let SyncRequest {
            member_id,
            instance_id,
            generation,
            protocol_type,
            protocol_name,
            assignments,
        } = request;
        let index = match self.known_member(member_id, instance_id) {
            Ok(index) => index,
            Err(error) => return Step::Done(Err(error)),
        };
        if generation != self.generation {
            return Step::Done(Err(GroupError::IllegalGeneration));
        }
        if protocol_type.is_some_and(|t| Some(t) != self.protocol_type.as_deref())
            || protocol_name.is_some_and(|p| Some(p) != self.protocol.as_deref())
        {
            return Step::Done(Err(GroupError::InconsistentGroupProtocol));
        }
        let assigning = self.state == GroupState::CompletingRebalance
            && self.leader.as_deref() == Some(member_id);
        if assigning {
            if let Err(error) = self.check_assignment_bytes(group_id, &assignments, limits) {
                return Step::Done(Err(error));
            }
        }
        let member = &mut self.members[index];
        member.expires = now + member.session_timeout;
        match self.state {
            // A classic group is never Assigning or Reconciling.
            GroupState::Empty | GroupState::Assigning | GroupState::Reconciling => {
                Step::Done(Err(GroupError::UnknownMemberId))
            }
            GroupState::PreparingRebalance => Step::Done(Err(GroupError::RebalanceInProgress)),
            GroupState::Stable => Step::Done(Ok(self.assignment_of(index))),
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                let member = &mut self.members[index];
                member.synced = true;
                if let Some(old) = member.sync_waiter.replace(tx) {
                    let _ = old.send(Err(GroupError::RebalanceInProgress));
                }
                if self.leader.as_deref() != Some(member_id) {
                    return Step::Wait(rx);
                }
                let mut value = self.stored_value();
                for stored in &mut value.members {
                    stored.assignment = assignments
                        .iter()
                        .find(|(id, _)| *id == stored.member_id)
                        .map(|(_, a)| a.clone())
                        .unwrap_or_default();
                }
                Step::Store(value, rx)
            }
        }
    }

    /// The leader's assignments: each at most `group.member.metadata.max.bytes`, and with the
    /// members' protocols at most `group.metadata.max.bytes`; otherwise INVALID_REQUEST (the
    /// group rebalances when the rebalance times out, as after a leader that never synced).
    fn check_assignment_bytes(
        &self,
        group_id: &str,
        assignments: &[(String, Bytes)],
        limits: &GroupLimits,
    ) -> Result<(), GroupError> {
        if Self::assignment_bytes(Some(self), assignments, limits).is_some() {
            return Ok(());
        }
        tracing::warn!(
            target: "weir::groups",
            group = %group_id,
            member_limit = limits.metadata.member_max_bytes,
            group_limit = limits.metadata.group_max_bytes,
            "SyncGroup refused (invalid request): the leader's assignment is over group.member.metadata.max.bytes or group.metadata.max.bytes"
        );
        Err(GroupError::InvalidRequest)
    }

    /// The bytes a leader's assignments take, or `None` when the group's bounds refuse them.
    /// `group` is `None` for a group without classic members.
    pub fn assignment_bytes(
        group: Option<&ClassicGroup>,
        assignments: &[(String, Bytes)],
        limits: &GroupLimits,
    ) -> Option<usize> {
        let largest = assignments.iter().map(|(_, a)| a.len()).max().unwrap_or(0);
        let assigned: usize = assignments.iter().map(|(_, a)| a.len()).sum();
        let protocols: usize = group
            .map_or(&[][..], |g| &g.members)
            .iter()
            .map(|m| protocols_bytes(&m.protocols))
            .sum();
        (largest <= limits.metadata.member_max_bytes
            && protocols + assigned <= limits.metadata.group_max_bytes)
            .then_some(assigned)
    }

    fn assignment_of(&self, index: usize) -> SyncAssignment {
        SyncAssignment {
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            assignment: self.members[index].assignment.clone(),
        }
    }

    /// The leader's assignment was stored (or not): hand every waiting member its part and
    /// become Stable, or tell them to rejoin. Ignored when the group moved on meanwhile.
    pub fn finish_sync(
        &mut self,
        generation: i32,
        stored: Result<&GroupValue, GroupError>,
        now: Instant,
        now_ms: i64,
    ) {
        if self.state != GroupState::CompletingRebalance || self.generation != generation {
            return;
        }
        match stored {
            Ok(value) => {
                for member in &mut self.members {
                    if let Some(stored) = value.members.iter().find(|s| s.member_id == member.id) {
                        member.assignment = stored.assignment.clone();
                    }
                }
                self.sync_deadline = None;
                self.set_state(GroupState::Stable, now_ms);
                for index in 0..self.members.len() {
                    let assignment = self.assignment_of(index);
                    if let Some(waiter) = self.members[index].sync_waiter.take() {
                        let _ = waiter.send(Ok(assignment));
                    }
                }
            }
            Err(error) => {
                for member in &mut self.members {
                    if let Some(waiter) = member.sync_waiter.take() {
                        let _ = waiter.send(Err(error));
                    }
                }
                self.prepare_rebalance(false, now, now_ms);
            }
        }
    }

    /// Handles a Heartbeat: keeps the session alive and tells the member whether to rejoin.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), GroupError> {
        let index = self.known_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        let member = &mut self.members[index];
        member.expires = now + member.session_timeout;
        match self.state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            GroupState::CompletingRebalance | GroupState::Stable => Ok(()),
            GroupState::Empty | GroupState::Assigning | GroupState::Reconciling => {
                Err(GroupError::UnknownMemberId)
            }
        }
    }

    /// Handles one member of a LeaveGroup (by member id, or by instance id for a static
    /// member). Returns true when the group became Empty.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now: Instant,
        now_ms: i64,
    ) -> Result<bool, GroupError> {
        if instance_id.is_none() {
            if let Some(position) = self.pending.iter().position(|p| p.id == member_id) {
                self.pending.remove(position);
                return Ok(self.try_complete_join(now, now_ms));
            }
        }
        let index = match instance_id {
            Some(instance) => {
                let index = self
                    .static_member_index(instance)
                    .ok_or(GroupError::UnknownMemberId)?;
                if !member_id.is_empty() && self.members[index].id != member_id {
                    return Err(GroupError::FencedInstanceId);
                }
                index
            }
            None => self
                .member_index(member_id)
                .ok_or(GroupError::UnknownMemberId)?,
        };
        Ok(self.remove_member(index, now, now_ms))
    }

    /// Removes a member (left, or its session expired) and rebalances the rest.
    fn remove_member(&mut self, index: usize, now: Instant, now_ms: i64) -> bool {
        let member = self.members.remove(index);
        if let Some(waiter) = member.join_waiter {
            let _ = waiter.send(JoinOutcome::failed(GroupError::UnknownMemberId, &member.id));
        }
        if let Some(waiter) = member.sync_waiter {
            let _ = waiter.send(Err(GroupError::UnknownMemberId));
        }
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                self.prepare_rebalance(false, now, now_ms);
                self.try_complete_join(now, now_ms)
            }
            GroupState::PreparingRebalance => self.try_complete_join(now, now_ms),
            GroupState::Empty | GroupState::Assigning | GroupState::Reconciling => false,
        }
    }

    /// Applies the passing of time: pending member ids and sessions expire, rebalances whose
    /// deadline passed complete without the members that did not rejoin, members that never
    /// synced are dropped. Returns true when the group became Empty.
    pub fn tick(&mut self, group_id: &str, now: Instant, now_ms: i64) -> bool {
        let pending_before = self.pending.len();
        self.pending.retain(|p| p.expires > now);
        let mut became_empty = false;
        if self.pending.len() != pending_before {
            became_empty |= self.try_complete_join(now, now_ms);
        }
        // Members waiting for a join response are kept alive by the rebalance deadline; the
        // others need heartbeats.
        while let Some(index) = self
            .members
            .iter()
            .position(|m| m.join_waiter.is_none() && m.sync_waiter.is_none() && m.expires <= now)
        {
            tracing::info!(target: "weir::groups", group = %group_id, member = %self.members[index].id, "session expired; removing the member");
            became_empty |= self.remove_member(index, now, now_ms);
        }
        if self.state == GroupState::CompletingRebalance
            && self.sync_deadline.is_some_and(|d| now >= d)
        {
            while let Some(index) = self.members.iter().position(|m| !m.synced) {
                tracing::info!(target: "weir::groups", group = %group_id, member = %self.members[index].id, "no SyncGroup within the rebalance timeout; removing the member");
                became_empty |= self.remove_member(index, now, now_ms);
                if self.state != GroupState::CompletingRebalance {
                    break;
                }
            }
        }
        became_empty | self.try_complete_join(now, now_ms)
    }

    /// The next moment [`ClassicGroup::tick`] has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let members = self
            .members
            .iter()
            .filter(|m| m.join_waiter.is_none() && m.sync_waiter.is_none())
            .map(|m| m.expires);
        let pending = self.pending.iter().map(|p| p.expires);
        let phase = [
            self.rebalance_deadline,
            self.initial_delay_until,
            self.sync_deadline,
        ];
        members
            .chain(pending)
            .chain(phase.into_iter().flatten())
            .min()
    }

    /// Checks that an OffsetCommit may be applied: a commit with generation -1 (from a client
    /// that is not a group member: admin tools, `assign()` consumers) only to an Empty group;
    /// a member's commit with its current generation, not while the group waits for the
    /// leader's assignment.
    pub fn check_commit(
        &self,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        self.check_generation(generation, member_id, instance_id)
    }

    /// Checks a TxnOffsetCommit: one that names a member (or a generation) must come from a
    /// member of the group's current generation, in any state; one that names none is taken
    /// (TxnOffsetCommit before version 3 carries no member), as Kafka does.
    pub fn check_txn_commit(
        &self,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        let outsider = generation < 0 && member_id.is_empty() && instance_id.is_none();
        if outsider || (generation < 0 && self.state == GroupState::Empty) {
            return Ok(());
        }
        self.check_generation(generation, member_id, instance_id)
    }

    /// The commit comes from a member of the current generation.
    fn check_generation(
        &self,
        generation: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), GroupError> {
        self.known_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration);
        }
        Ok(())
    }

    /// Topics a `consumer`-protocol group's members subscribe to (from their metadata), for
    /// OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC.
    pub fn subscribed_topics(&self) -> Vec<String> {
        if self.protocol_type.as_deref() != Some("consumer") {
            return Vec::new();
        }
        let protocol = self.protocol.as_deref().unwrap_or_default();
        let mut topics: Vec<String> = self
            .members
            .iter()
            .flat_map(|m| crate::subscription::topics(&m.metadata_for(protocol)))
            .collect();
        topics.sort();
        topics.dedup();
        topics
    }
}

/// What DescribeGroups shows of one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's address.
    pub client_host: String,
    /// Metadata for the chosen protocol.
    pub metadata: Bytes,
    /// Its assignment.
    pub assignment: Bytes,
}

fn duration_ms(duration: Duration) -> i32 {
    i32::try_from(duration.as_millis()).unwrap_or(i32::MAX)
}
