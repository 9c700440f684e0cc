//! A consumer in a consumer group (the classic protocol): subscribe to topics, get partitions
//! from the group's leader, commit offsets automatically or by hand, hear about rebalances.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, GroupId, HeartbeatRequest,
    HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse,
    OffsetCommitRequest, OffsetCommitResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::task::JoinHandle;

use crate::admin::check;
use crate::assignor::{
    decode_assignment, decode_subscription, encode_assignment, encode_subscription, group_by_topic,
    Assignor, TopicPartition,
};
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::consumer::{Consumer, ConsumerConfig, ConsumerRecord, OffsetSpec};
use crate::error::{ClientError, Result};
use crate::groups::committed_offsets;

/// Wait before retrying a join or a coordinator lookup that the group asked to retry.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);

/// Group consumer settings (the Java client's names in the docs, its defaults).
#[derive(Debug, Clone)]
pub struct GroupConsumerConfig {
    /// Fetch and connection settings.
    pub consumer: ConsumerConfig,
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: a static member keeps its partitions across restarts.
    pub group_instance_id: Option<String>,
    /// `session.timeout.ms` (45 s).
    pub session_timeout: Duration,
    /// `max.poll.interval.ms` (5 min): how long a rebalance waits for this member.
    pub rebalance_timeout: Duration,
    /// `heartbeat.interval.ms` (3 s).
    pub heartbeat_interval: Duration,
    /// `auto.commit.interval.ms` when auto commit is on (5 s); `None` commits only by hand.
    pub auto_commit_interval: Option<Duration>,
    /// `auto.offset.reset`: where a partition without a committed offset starts.
    pub auto_offset_reset: OffsetSpec,
    /// `partition.assignment.strategy`, in preference order.
    pub assignors: Vec<Assignor>,
}

impl GroupConsumerConfig {
    /// Defaults like the Java client's, with cooperative-sticky assignment.
    pub fn new(bootstrap: &str, group_id: &str) -> GroupConsumerConfig {
        GroupConsumerConfig {
            consumer: ConsumerConfig::new(bootstrap),
            group_id: group_id.to_string(),
            group_instance_id: None,
            session_timeout: Duration::from_secs(45),
            rebalance_timeout: Duration::from_secs(300),
            heartbeat_interval: Duration::from_secs(3),
            auto_commit_interval: Some(Duration::from_secs(5)),
            auto_offset_reset: OffsetSpec::Latest,
            assignors: vec![Assignor::CooperativeSticky],
        }
    }
}

/// A change of this member's assignment, handed to the rebalance listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebalanceEvent {
    /// These partitions were taken away (their offsets were committed first with auto
    /// commit).
    Revoked(Vec<TopicPartition>),
    /// These partitions were added.
    Assigned(Vec<TopicPartition>),
    /// The membership was lost (session expired): these partitions may already be someone
    /// else's, so nothing was committed for them.
    Lost(Vec<TopicPartition>),
}

/// The member id and generation the heartbeat task uses.
#[derive(Debug, Clone, Default)]
struct Membership {
    member_id: String,
    generation: i32,
}

/// The rebalance listener.
pub type RebalanceListener = Box<dyn FnMut(&RebalanceEvent) + Send>;

/// A consumer in a group.
///
/// ```no_run
/// # async fn example() -> weir_client::Result<()> {
/// use weir_client::{GroupConsumer, GroupConsumerConfig};
/// let config = GroupConsumerConfig::new("127.0.0.1:9092", "billing");
/// let mut consumer = GroupConsumer::subscribe(config, &["orders"]).await?;
/// loop {
///     for record in consumer.poll(std::time::Duration::from_secs(1)).await? {
///         println!("{} {} {:?}", record.partition, record.offset, record.value);
///     }
/// }
/// # }
/// ```
pub struct GroupConsumer {
    config: GroupConsumerConfig,
    topics: Vec<String>,
    consumer: Consumer,
    coordinator: Option<Arc<Connection>>,
    membership: Arc<Mutex<Membership>>,
    /// Set by the heartbeat task (or a failed commit) when the member must rejoin.
    rejoin: Arc<AtomicBool>,
    assignment: BTreeSet<TopicPartition>,
    protocol: Option<Assignor>,
    listener: Option<RebalanceListener>,
    heartbeat: Option<JoinHandle<()>>,
    last_commit: Instant,
}

fn group_id(config: &GroupConsumerConfig) -> GroupId {
    GroupId(StrBytes::from_string(config.group_id.clone()))
}

fn millis(d: Duration) -> i32 {
    d.as_millis().min(i32::MAX as u128) as i32
}

impl GroupConsumer {
    /// Joins the group subscribed to `topics` and waits for the first assignment.
    pub async fn subscribe(config: GroupConsumerConfig, topics: &[&str]) -> Result<GroupConsumer> {
        Self::subscribe_with(config, topics, None).await
    }

    /// Like [`GroupConsumer::subscribe`], with a listener told of every assignment change
    /// (including the first).
    pub async fn subscribe_with(
        config: GroupConsumerConfig,
        topics: &[&str],
        listener: Option<RebalanceListener>,
    ) -> Result<GroupConsumer> {
        if config.assignors.is_empty() {
            return Err(ClientError::InvalidArgument(
                "no partition assignor given".into(),
            ));
        }
        let mut consumer = GroupConsumer {
            consumer: Consumer::new(config.consumer.clone()),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            config,
            coordinator: None,
            membership: Arc::new(Mutex::new(Membership {
                member_id: String::new(),
                generation: -1,
            })),
            rejoin: Arc::new(AtomicBool::new(true)),
            assignment: BTreeSet::new(),
            protocol: None,
            listener,
            heartbeat: None,
            last_commit: Instant::now(),
        };
        if let Err(error) = consumer.ensure_joined().await {
            // A member the coordinator knows would hold the group's next rebalance up until
            // its session expired: leave before giving up.
            let _ = consumer.close().await;
            return Err(error);
        }
        Ok(consumer)
    }

    /// The partitions assigned to this member now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.assignment.iter().cloned().collect()
    }

    /// The member id and generation of the current membership.
    pub fn membership(&self) -> (String, i32) {
        let m = self.membership.lock().unwrap_or_else(|e| e.into_inner());
        (m.member_id.clone(), m.generation)
    }

    /// True when every assigned partition has been read to its last seen high watermark.
    pub fn at_end(&self) -> bool {
        self.consumer.at_end()
    }

    /// Records available now, waiting up to `timeout`; rejoins first when the group
    /// rebalances, and commits when the auto-commit interval has passed.
    pub async fn poll(&mut self, timeout: Duration) -> Result<Vec<ConsumerRecord>> {
        self.ensure_joined().await?;
        if self.assignment.is_empty() {
            tokio::time::sleep(timeout.min(self.config.heartbeat_interval)).await;
            return Ok(Vec::new());
        }
        let records = self.consumer.poll(timeout).await?;
        if let Some(interval) = self.config.auto_commit_interval {
            if self.last_commit.elapsed() >= interval {
                match self.commit().await {
                    Ok(()) => {}
                    Err(error) if error.is_rebalance() => {
                        tracing::debug!(target: "weir::client", %error, "auto commit refused by a rebalance; rejoining");
                    }
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(records)
    }

    /// Takes part in a rebalance the group started, without fetching: for a caller that holds
    /// records it has not handed out yet and must not fetch more, but must not hold the
    /// group's rebalance up either.
    pub async fn keep_membership(&mut self) -> Result<()> {
        self.ensure_joined().await
    }

    /// Commits the position (next offset to read) of every assigned partition.
    pub async fn commit(&mut self) -> Result<()> {
        let positions: Vec<(TopicPartition, i64)> = self
            .consumer
            .positions()
            .iter()
            .filter(|(tp, _)| self.assignment.contains(*tp))
            .map(|(tp, o)| (tp.clone(), *o))
            .collect();
        self.commit_offsets(&positions).await
    }

    /// Commits the given next offsets to read.
    pub async fn commit_offsets(&mut self, offsets: &[(TopicPartition, i64)]) -> Result<()> {
        self.last_commit = Instant::now();
        if offsets.is_empty() {
            return Ok(());
        }
        let coordinator = self.coordinator().await?;
        let membership = self
            .membership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut request = OffsetCommitRequest::default();
        request.group_id = group_id(&self.config);
        request.generation_id_or_member_epoch = membership.generation;
        request.member_id = StrBytes::from_string(membership.member_id);
        request.group_instance_id = self
            .config
            .group_instance_id
            .clone()
            .map(StrBytes::from_string);
        let by_topic = group_by_topic(offsets.iter().map(|(tp, _)| tp.clone()));
        let offset_of: BTreeMap<&TopicPartition, i64> =
            offsets.iter().map(|(tp, o)| (tp, *o)).collect();
        request.topics = by_topic
            .into_iter()
            .map(|(topic, partitions)| {
                let mut t = OffsetCommitRequestTopic::default();
                t.partitions = partitions
                    .into_iter()
                    .map(|p| {
                        let mut partition = OffsetCommitRequestPartition::default();
                        partition.partition_index = p;
                        partition.committed_offset = offset_of[&(topic.clone(), p)];
                        partition.committed_leader_epoch = -1;
                        partition
                    })
                    .collect();
                t.name = TopicName(StrBytes::from_string(topic));
                t
            })
            .collect();
        let response: OffsetCommitResponse =
            coordinator.call(ApiKey::OffsetCommit, 8, &request).await?;
        for t in response.topics {
            for p in t.partitions {
                if let Err(error) = check(p.error_code, None) {
                    self.note_group_error(p.error_code);
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    /// Leaves the group (committing first with auto commit), so the others rebalance at once.
    pub async fn close(mut self) -> Result<()> {
        if self.config.auto_commit_interval.is_some() && !self.assignment.is_empty() {
            let _ = self.commit().await;
        }
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
        let revoked = self.assignment();
        if !revoked.is_empty() {
            self.notify(RebalanceEvent::Revoked(revoked));
        }
        let membership = self
            .membership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if membership.member_id.is_empty() {
            return Ok(());
        }
        let coordinator = self.coordinator().await?;
        let mut member = MemberIdentity::default();
        member.member_id = StrBytes::from_string(membership.member_id);
        member.group_instance_id = self
            .config
            .group_instance_id
            .clone()
            .map(StrBytes::from_string);
        let mut request = LeaveGroupRequest::default();
        request.group_id = group_id(&self.config);
        request.members = vec![member];
        // v3 (Kafka 2.4+) names members in a list, which also carries the instance id.
        let response: LeaveGroupResponse =
            coordinator.call_at(ApiKey::LeaveGroup, 3, &request).await?;
        check(response.error_code, None)?;
        match response.members.first() {
            Some(m) => check(m.error_code, None),
            None => Ok(()),
        }
    }

    fn notify(&mut self, event: RebalanceEvent) {
        if let Some(listener) = self.listener.as_mut() {
            listener(&event);
        }
    }

    /// Errors that mean the membership is stale: rejoin.
    fn note_group_error(&self, code: i16) {
        let stale = matches!(
            ResponseError::try_from_code(code),
            Some(
                ResponseError::RebalanceInProgress
                    | ResponseError::IllegalGeneration
                    | ResponseError::UnknownMemberId
                    | ResponseError::FencedInstanceId
                    | ResponseError::NotCoordinator
                    | ResponseError::CoordinatorNotAvailable
            )
        );
        if stale {
            self.rejoin.store(true, Ordering::Release);
        }
    }

    async fn coordinator(&mut self) -> Result<Arc<Connection>> {
        if let Some(c) = &self.coordinator {
            return Ok(c.clone());
        }
        let cluster = self.consumer.cluster().clone();
        let deadline = Instant::now() + cluster.config().request_timeout;
        loop {
            let connection = cluster.any_broker().await?;
            let mut request = FindCoordinatorRequest::default();
            request.key = StrBytes::from_string(self.config.group_id.clone());
            let response: FindCoordinatorResponse = connection
                .call(ApiKey::FindCoordinator, 3, &request)
                .await?;
            if response.error_code != 0
                && ClientError::from_code(response.error_code, None)
                    .is_some_and(|e| e.is_retriable())
                && Instant::now() + RETRY_BACKOFF < deadline
            {
                tokio::time::sleep(RETRY_BACKOFF).await;
                continue;
            }
            check(response.error_code, response.error_message.as_ref())?;
            let address = format!("{}:{}", response.host.as_str(), response.port);
            let coordinator = cluster.connection_to(&address).await?;
            self.coordinator = Some(coordinator.clone());
            return Ok(coordinator);
        }
    }

    /// Rejoins when the heartbeat (or a commit) said so, until this member has a current
    /// assignment. A cooperative rebalance that revoked partitions rejoins once more, so the
    /// partitions this member gave up can be assigned to their new owners.
    async fn ensure_joined(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.config.rebalance_timeout + self.config.session_timeout;
        while self.rejoin.swap(false, Ordering::AcqRel) {
            if Instant::now() >= deadline {
                return Err(ClientError::Timeout(
                    millis(self.config.rebalance_timeout) as u64
                ));
            }
            if let Err(error) = self.join_once().await {
                self.rejoin.store(true, Ordering::Release);
                match &error {
                    ClientError::Broker { code, .. } if self.retriable_join_error(*code) => {
                        tokio::time::sleep(RETRY_BACKOFF).await;
                    }
                    ClientError::Connection { .. } | ClientError::Unreachable(_) => {
                        self.coordinator = None;
                        tokio::time::sleep(RETRY_BACKOFF).await;
                    }
                    _ => return Err(error),
                }
            }
        }
        Ok(())
    }

    fn retriable_join_error(&mut self, code: i16) -> bool {
        match ResponseError::try_from_code(code) {
            Some(ResponseError::UnknownMemberId | ResponseError::IllegalGeneration) => {
                self.lose_membership();
                true
            }
            Some(ResponseError::NotCoordinator | ResponseError::CoordinatorNotAvailable) => {
                self.coordinator = None;
                true
            }
            Some(
                ResponseError::RebalanceInProgress
                | ResponseError::CoordinatorLoadInProgress
                | ResponseError::MemberIdRequired,
            ) => true,
            _ => false,
        }
    }

    /// The session expired or the member was fenced: everything it held is lost.
    fn lose_membership(&mut self) {
        *self.membership.lock().unwrap_or_else(|e| e.into_inner()) = Membership {
            member_id: String::new(),
            generation: -1,
        };
        let lost = self.assignment();
        for (topic, partition) in &lost {
            self.consumer.unassign(topic, *partition);
        }
        self.assignment.clear();
        if !lost.is_empty() {
            self.notify(RebalanceEvent::Lost(lost));
        }
    }

    async fn join_once(&mut self) -> Result<()> {
        let coordinator = self.coordinator().await?;
        let eager = !self.config.assignors.iter().all(|a| a.is_cooperative());
        if eager && !self.assignment.is_empty() {
            // Eager protocols give everything up before joining.
            self.revoke(self.assignment()).await;
        }
        let member_id = self
            .membership
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .member_id
            .clone();
        let subscription = encode_subscription(&self.topics, &self.assignment);
        let mut request = JoinGroupRequest::default();
        request.group_id = group_id(&self.config);
        request.session_timeout_ms = millis(self.config.session_timeout);
        request.rebalance_timeout_ms = millis(self.config.rebalance_timeout);
        request.member_id = StrBytes::from_string(member_id);
        request.group_instance_id = self
            .config
            .group_instance_id
            .clone()
            .map(StrBytes::from_string);
        request.protocol_type = StrBytes::from_static_str("consumer");
        request.protocols = self
            .config
            .assignors
            .iter()
            .map(|a| {
                let mut p = JoinGroupRequestProtocol::default();
                p.name = StrBytes::from_static_str(a.name());
                p.metadata = subscription.clone();
                p
            })
            .collect();
        let joined: JoinGroupResponse = coordinator.call(ApiKey::JoinGroup, 5, &request).await?;
        if joined.error_code == ResponseError::MemberIdRequired.code() {
            self.membership
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .member_id = joined.member_id.to_string();
        }
        check(joined.error_code, None)?;
        let protocol = joined
            .protocol_name
            .as_ref()
            .and_then(|p| Assignor::from_name(p.as_str()))
            .ok_or_else(|| ClientError::Protocol("the group chose an unknown assignor".into()))?;
        let assignments = if joined.leader == joined.member_id {
            lead(self.consumer.cluster(), protocol, &joined).await?
        } else {
            Vec::new()
        };
        let mut sync = SyncGroupRequest::default();
        sync.group_id = group_id(&self.config);
        sync.generation_id = joined.generation_id;
        sync.member_id = joined.member_id.clone();
        sync.group_instance_id = request.group_instance_id.clone();
        sync.protocol_type = Some(StrBytes::from_static_str("consumer"));
        sync.protocol_name = joined.protocol_name.clone();
        sync.assignments = assignments;
        let synced: SyncGroupResponse = coordinator.call(ApiKey::SyncGroup, 3, &sync).await?;
        check(synced.error_code, None)?;
        *self.membership.lock().unwrap_or_else(|e| e.into_inner()) = Membership {
            member_id: joined.member_id.to_string(),
            generation: joined.generation_id,
        };
        self.protocol = Some(protocol);
        let new: BTreeSet<TopicPartition> =
            decode_assignment(&synced.assignment).into_iter().collect();
        let revoked: Vec<TopicPartition> = self.assignment.difference(&new).cloned().collect();
        let added: Vec<TopicPartition> = new.difference(&self.assignment).cloned().collect();
        if !revoked.is_empty() {
            self.revoke(revoked).await;
            if protocol.is_cooperative() {
                self.rejoin.store(true, Ordering::Release);
            }
        }
        if !added.is_empty() {
            self.take(&coordinator, &added).await?;
        }
        self.start_heartbeat(coordinator);
        Ok(())
    }

    /// Gives up `partitions`: commits their positions (auto commit), stops fetching them.
    async fn revoke(&mut self, partitions: Vec<TopicPartition>) {
        if self.config.auto_commit_interval.is_some() {
            let positions: Vec<(TopicPartition, i64)> = partitions
                .iter()
                .filter_map(|tp| self.consumer.positions().get(tp).map(|o| (tp.clone(), *o)))
                .collect();
            if let Err(error) = self.commit_offsets(&positions).await {
                tracing::debug!(target: "weir::client", %error, "commit of revoked partitions failed");
            }
        }
        for (topic, partition) in &partitions {
            self.consumer.unassign(topic, *partition);
            self.assignment.remove(&(topic.clone(), *partition));
        }
        self.notify(RebalanceEvent::Revoked(partitions));
    }

    /// Starts reading newly assigned partitions at their committed offsets.
    async fn take(&mut self, coordinator: &Connection, added: &[TopicPartition]) -> Result<()> {
        let committed = committed_offsets(
            coordinator,
            &self.config.group_id,
            Some(group_by_topic(added.iter().cloned())),
        )
        .await?;
        for tp in added {
            let from = match committed.get(tp) {
                Some(offset) => OffsetSpec::At(*offset),
                None => self.config.auto_offset_reset,
            };
            self.consumer.assign(&tp.0, tp.1, from).await?;
            self.assignment.insert(tp.clone());
        }
        self.notify(RebalanceEvent::Assigned(added.to_vec()));
        Ok(())
    }

    /// Heartbeats every `heartbeat.interval.ms` on the coordinator connection; an answer
    /// saying the group moved on marks this member for rejoining at its next poll.
    fn start_heartbeat(&mut self, coordinator: Arc<Connection>) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
        let membership = self.membership.clone();
        let rejoin = self.rejoin.clone();
        let interval = self.config.heartbeat_interval;
        let group = group_id(&self.config);
        let instance = self
            .config
            .group_instance_id
            .clone()
            .map(StrBytes::from_string);
        self.heartbeat = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let m = membership.lock().unwrap_or_else(|e| e.into_inner()).clone();
                let mut request = HeartbeatRequest::default();
                request.group_id = group.clone();
                request.generation_id = m.generation;
                request.member_id = StrBytes::from_string(m.member_id);
                request.group_instance_id = instance.clone();
                let answer: Result<HeartbeatResponse> =
                    coordinator.call(ApiKey::Heartbeat, 4, &request).await;
                match answer {
                    Ok(r) if r.error_code == 0 => {}
                    Ok(_) | Err(_) => rejoin.store(true, Ordering::Release),
                }
            }
        }));
    }
}

/// As the leader: assigns every member's subscription with the chosen assignor.
async fn lead(
    cluster: &Cluster,
    protocol: Assignor,
    joined: &JoinGroupResponse,
) -> Result<Vec<SyncGroupRequestAssignment>> {
    let members: Vec<_> = joined
        .members
        .iter()
        .filter_map(|m| decode_subscription(m.member_id.as_str(), &m.metadata))
        .collect();
    let topics: BTreeSet<&String> = members.iter().flat_map(|m| m.topics.iter()).collect();
    let mut partitions = BTreeMap::new();
    for topic in topics {
        match cluster.topic(topic, false).await {
            Ok(info) => {
                partitions.insert(topic.clone(), info.partitions.len() as i32);
            }
            Err(ClientError::UnknownTopic(_)) => {}
            Err(error) => return Err(error),
        }
    }
    let assigned = protocol.assign(&members, &partitions);
    Ok(joined
        .members
        .iter()
        .map(|m| {
            let mut a = SyncGroupRequestAssignment::default();
            a.member_id = m.member_id.clone();
            a.assignment = encode_assignment(
                assigned
                    .get(m.member_id.as_str())
                    .map_or(&[][..], |v| v.as_slice()),
            );
            a
        })
        .collect())
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }
}
