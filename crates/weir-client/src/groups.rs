//! Consumer-group administration on [`Admin`]: list groups, describe one with its members,
//! committed offsets and lag, delete an empty group, and reset a group's committed offsets.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, DeleteGroupsRequest,
    DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::admin::check;
use crate::admin::Admin;
use crate::assignor::{decode_assignment, group_by_topic};
use crate::connection::Connection;
use crate::consumer::{list_offset, OffsetSpec};
use crate::error::{ClientError, Result};

/// Wait between FindCoordinator attempts while the coordinator is not available yet.
const COORDINATOR_RETRY: Duration = Duration::from_millis(200);

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// `Stable`, `Empty`, `PreparingRebalance`, … (empty when the broker does not say).
    pub state: String,
    /// `consumer` for Kafka consumers; empty for a group that only has offsets.
    pub protocol_type: String,
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// Member id.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    /// The member's `client.id`.
    pub client_id: String,
    /// The member's address as the broker saw it.
    pub client_host: String,
    /// Assigned partitions by topic (consumer groups only).
    pub assignment: Vec<(String, Vec<i32>)>,
}

/// A partition's committed offset, log end and lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Member id of the member it is assigned to.
    pub member: Option<String>,
    /// The committed offset, if any.
    pub committed: Option<i64>,
    /// The high watermark (what a consumer can read up to).
    pub log_end_offset: i64,
    /// `log_end_offset - committed`, when something is committed.
    pub lag: Option<i64>,
}

/// A group with its members and per-partition lag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Group id.
    pub group_id: String,
    /// State; `Dead` when the group does not exist.
    pub state: String,
    /// Protocol type.
    pub protocol_type: String,
    /// Chosen protocol (assignor).
    pub protocol: String,
    /// Members.
    pub members: Vec<GroupMember>,
    /// Every partition with a committed offset or an owner, sorted.
    pub partitions: Vec<PartitionLag>,
}

/// Where to move a group's committed offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    /// The first retained offset.
    Earliest,
    /// The high watermark.
    Latest,
    /// This offset (kept within the retained range).
    To(i64),
    /// The first offset at or after this timestamp (ms), or the end.
    Timestamp(i64),
    /// The committed offset moved by this much (kept within the retained range).
    ShiftBy(i64),
}

/// One partition's offset before and after a reset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetChange {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The committed offset before, if any.
    pub current: Option<i64>,
    /// The new committed offset.
    pub new: i64,
}

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_string()))
}

/// The committed offsets of `group` for the partitions of `topics` (every committed one when
/// `None`), from its coordinator; partitions without a commit are left out.
pub(crate) async fn committed_offsets(
    coordinator: &Connection,
    group: &str,
    topics: Option<BTreeMap<String, Vec<i32>>>,
) -> Result<BTreeMap<(String, i32), i64>> {
    let mut request = OffsetFetchRequest::default();
    request.group_id = group_id(group);
    request.topics = topics.map(|topics| {
        topics
            .into_iter()
            .map(|(name, partitions)| {
                let mut t = OffsetFetchRequestTopic::default();
                t.name = TopicName(StrBytes::from_string(name));
                t.partition_indexes = partitions;
                t
            })
            .collect()
    });
    let response: OffsetFetchResponse = coordinator.call(ApiKey::OffsetFetch, 7, &request).await?;
    check(response.error_code, None)?;
    let mut committed = BTreeMap::new();
    for t in response.topics {
        for p in t.partitions {
            check(p.error_code, None)?;
            if p.committed_offset >= 0 {
                committed.insert((t.name.to_string(), p.partition_index), p.committed_offset);
            }
        }
    }
    Ok(committed)
}

impl Admin {
    /// A connection to `group`'s coordinator, waiting (within the request timeout) while the
    /// cluster answers COORDINATOR_NOT_AVAILABLE or COORDINATOR_LOAD_IN_PROGRESS.
    async fn group_coordinator(&self, group: &str) -> Result<Arc<Connection>> {
        self.coordinator(group, 0).await
    }

    /// A connection to the coordinator of `key` (`key_type` 0: a group, 1: a transactional
    /// id), waiting as [`Admin::group_coordinator`] does.
    pub(crate) async fn coordinator(&self, key: &str, key_type: i8) -> Result<Arc<Connection>> {
        let deadline = Instant::now() + self.cluster.config().request_timeout;
        loop {
            let connection = self.cluster.any_broker().await?;
            let mut request = FindCoordinatorRequest::default();
            request.key = StrBytes::from_string(key.to_string());
            request.key_type = key_type;
            let response: FindCoordinatorResponse = connection
                .call(ApiKey::FindCoordinator, 3, &request)
                .await?;
            let error = ResponseError::try_from_code(response.error_code);
            let waiting = matches!(
                error,
                Some(ResponseError::CoordinatorNotAvailable)
                    | Some(ResponseError::CoordinatorLoadInProgress)
            );
            if waiting && Instant::now() + COORDINATOR_RETRY < deadline {
                tokio::time::sleep(COORDINATOR_RETRY).await;
                continue;
            }
            check(response.error_code, response.error_message.as_ref())?;
            let address = format!("{}:{}", response.host.as_str(), response.port);
            return self.cluster.connection_to(&address).await;
        }
    }

    /// Every group on every broker, sorted by id.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        self.cluster.refresh(None, false).await?;
        let (brokers, _, _) = self.cluster.brokers().await;
        let mut groups = BTreeMap::new();
        for broker in brokers {
            let connection = self.cluster.broker(broker.node_id).await?;
            let response: ListGroupsResponse = connection
                .call(ApiKey::ListGroups, 4, &ListGroupsRequest::default())
                .await?;
            check(response.error_code, None)?;
            for g in response.groups {
                groups.insert(
                    g.group_id.to_string(),
                    GroupListing {
                        group_id: g.group_id.to_string(),
                        state: g.group_state.to_string(),
                        protocol_type: g.protocol_type.to_string(),
                    },
                );
            }
        }
        Ok(groups.into_values().collect())
    }

    /// A group's state, members, and per partition: owner, committed offset, log end, lag.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription> {
        let connection = self.group_coordinator(group).await?;
        let mut request = DescribeGroupsRequest::default();
        request.groups = vec![group_id(group)];
        let response: DescribeGroupsResponse =
            connection.call(ApiKey::DescribeGroups, 5, &request).await?;
        let described = response
            .groups
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("DescribeGroups answered no group".into()))?;
        check(described.error_code, described.error_message.as_ref())?;
        // Below v6 DescribeGroups calls a consumer-protocol group (KIP-848) Dead, as it does
        // a missing one: ConsumerGroupDescribe tells them apart.
        if described.group_state.as_str() == "Dead" && described.members.is_empty() {
            if let Some(found) = self.describe_consumer_group(&connection, group).await? {
                return self.with_lag(&connection, found).await;
            }
        }
        let consumer = described.protocol_type.as_str() == "consumer";
        let members: Vec<GroupMember> = described
            .members
            .into_iter()
            .map(|m| GroupMember {
                assignment: match consumer {
                    true => group_by_topic(decode_assignment(&m.member_assignment).into_iter())
                        .into_iter()
                        .collect(),
                    false => Vec::new(),
                },
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
            })
            .collect();
        let found = GroupDescription {
            group_id: group.to_string(),
            state: described.group_state.to_string(),
            protocol_type: described.protocol_type.to_string(),
            protocol: described.protocol_data.to_string(),
            members,
            partitions: Vec::new(),
        };
        self.with_lag(&connection, found).await
    }

    /// A consumer-protocol group as ConsumerGroupDescribe shows it (the assignor as its
    /// protocol), or `None` when the broker has no such group or does not know the API.
    async fn describe_consumer_group(
        &self,
        connection: &Connection,
        group: &str,
    ) -> Result<Option<GroupDescription>> {
        if connection
            .version_for(ApiKey::ConsumerGroupDescribe, 0, 1)
            .is_err()
        {
            return Ok(None);
        }
        let mut request = ConsumerGroupDescribeRequest::default();
        request.group_ids = vec![group_id(group)];
        let response: ConsumerGroupDescribeResponse = connection
            .call(ApiKey::ConsumerGroupDescribe, 1, &request)
            .await?;
        let Some(described) = response.groups.into_iter().next() else {
            return Ok(None);
        };
        if described.error_code == ResponseError::GroupIdNotFound.code() {
            return Ok(None);
        }
        check(described.error_code, described.error_message.as_ref())?;
        let members = described
            .members
            .into_iter()
            .map(|m| GroupMember {
                assignment: m
                    .assignment
                    .topic_partitions
                    .into_iter()
                    .map(|t| (t.topic_name.to_string(), t.partitions))
                    .collect(),
                member_id: m.member_id.to_string(),
                group_instance_id: m.instance_id.map(|s| s.to_string()),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
            })
            .collect();
        Ok(Some(GroupDescription {
            group_id: group.to_string(),
            state: described.group_state.to_string(),
            protocol_type: "consumer".to_string(),
            protocol: described.assignor_name.to_string(),
            members,
            partitions: Vec::new(),
        }))
    }

    /// Fills in a described group's partitions: every committed or owned one, with its owner,
    /// committed offset, log end and lag.
    async fn with_lag(
        &self,
        connection: &Connection,
        mut found: GroupDescription,
    ) -> Result<GroupDescription> {
        let members = &found.members;
        let committed = committed_offsets(connection, &found.group_id, None).await?;
        let mut owners: BTreeMap<(String, i32), Option<String>> =
            committed.keys().map(|k| (k.clone(), None)).collect();
        for m in members {
            for (topic, partitions) in &m.assignment {
                for p in partitions {
                    owners.insert((topic.clone(), *p), Some(m.member_id.clone()));
                }
            }
        }
        let mut partitions = Vec::with_capacity(owners.len());
        for ((topic, partition), member) in owners {
            let log_end_offset = list_offset(&self.cluster, &topic, partition, OffsetSpec::Latest)
                .await?
                .unwrap_or(0);
            let committed = committed.get(&(topic.clone(), partition)).copied();
            partitions.push(PartitionLag {
                lag: committed.map(|c| (log_end_offset - c).max(0)),
                topic,
                partition,
                member,
                committed,
                log_end_offset,
            });
        }
        found.partitions = partitions;
        Ok(found)
    }

    /// Deletes a group with no members, with its committed offsets.
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let connection = self.group_coordinator(group).await?;
        let mut request = DeleteGroupsRequest::default();
        request.groups_names = vec![group_id(group)];
        let response: DeleteGroupsResponse =
            connection.call(ApiKey::DeleteGroups, 2, &request).await?;
        let result = response
            .results
            .into_iter()
            .next()
            .ok_or_else(|| ClientError::Protocol("DeleteGroups answered no group".into()))?;
        check(result.error_code, None)
    }

    /// Moves `group`'s committed offsets for every partition of `topic` (only while the
    /// group has no members, as Kafka's tool requires); with `dry_run` only computes them.
    pub async fn reset_offsets(
        &self,
        group: &str,
        topic: &str,
        reset: OffsetReset,
        dry_run: bool,
    ) -> Result<Vec<OffsetChange>> {
        let description = self.describe_group(group).await?;
        if !description.members.is_empty() {
            return Err(ClientError::InvalidArgument(format!(
                "group {group} has {} active member(s) ({}): stop its consumers first",
                description.members.len(),
                description.state
            )));
        }
        let info = self.cluster.topic(topic, false).await?;
        let indexes: Vec<i32> = info.partitions.iter().map(|p| p.partition).collect();
        let connection = self.group_coordinator(group).await?;
        let committed = committed_offsets(
            &connection,
            group,
            Some(BTreeMap::from([(topic.to_string(), indexes.clone())])),
        )
        .await?;
        let mut changes = Vec::with_capacity(indexes.len());
        for partition in indexes {
            let bound = |spec| list_offset(&self.cluster, topic, partition, spec);
            let earliest = bound(OffsetSpec::Earliest).await?.unwrap_or(0);
            let latest = bound(OffsetSpec::Latest).await?.unwrap_or(earliest);
            let current = committed.get(&(topic.to_string(), partition)).copied();
            let wanted = match reset {
                OffsetReset::Earliest => earliest,
                OffsetReset::Latest => latest,
                OffsetReset::To(offset) => offset,
                OffsetReset::Timestamp(ms) => {
                    bound(OffsetSpec::Timestamp(ms)).await?.unwrap_or(latest)
                }
                OffsetReset::ShiftBy(delta) => current.unwrap_or(earliest).saturating_add(delta),
            };
            changes.push(OffsetChange {
                topic: topic.to_string(),
                partition,
                current,
                new: wanted.clamp(earliest, latest.max(earliest)),
            });
        }
        if dry_run || changes.is_empty() {
            return Ok(changes);
        }
        let mut request = OffsetCommitRequest::default();
        request.group_id = group_id(group);
        request.generation_id_or_member_epoch = -1;
        let mut t = OffsetCommitRequestTopic::default();
        t.name = TopicName(StrBytes::from_string(topic.to_string()));
        t.partitions = changes
            .iter()
            .map(|c| {
                let mut p = OffsetCommitRequestPartition::default();
                p.partition_index = c.partition;
                p.committed_offset = c.new;
                p.committed_leader_epoch = -1;
                p
            })
            .collect();
        request.topics = vec![t];
        let response: OffsetCommitResponse =
            connection.call(ApiKey::OffsetCommit, 8, &request).await?;
        for t in response.topics {
            for p in t.partitions {
                check(p.error_code, None)?;
            }
        }
        Ok(changes)
    }
}
