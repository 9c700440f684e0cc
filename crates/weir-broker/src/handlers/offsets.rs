//! Committed offsets: OffsetCommit (key 8, v2–9; from v9 the generation is a consumer-protocol
//! member's epoch), OffsetFetch (key 9, v1–9, one group per request below v8, many from v8;
//! v9 names the member) and OffsetDelete (key 47, v0). Offsets for partitions
//! that do not exist are refused with UNKNOWN_TOPIC_OR_PARTITION and change nothing.

use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::ResponseError;
use weir_coordinator::{CommitEntry, GroupError};

use crate::broker::Broker;
use crate::handlers::errors::{group_code, group_error};
use crate::handlers::str_bytes;

fn partition_exists(broker: &Broker, topic: &str, partition: i32) -> bool {
    broker
        .image()
        .topic(topic)
        .is_some_and(|t| (0..t.partition_count()).contains(&partition))
}

/// OffsetCommit: every known partition's offset is stored in one batch; the answer waits
/// until it is durable.
pub async fn commit(
    broker: &Arc<Broker>,
    request: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let mut entries = Vec::new();
    // (topic index, partition index in the response, entry index or the refusal)
    let mut slots: Vec<(usize, usize, Result<usize, GroupError>)> = Vec::new();
    let mut response = OffsetCommitResponse::default();
    for (t, topic) in request.topics.iter().enumerate() {
        let mut topic_response = OffsetCommitResponseTopic::default();
        topic_response.name = topic.name.clone();
        for (p, partition) in topic.partitions.iter().enumerate() {
            let mut result = OffsetCommitResponsePartition::default();
            result.partition_index = partition.partition_index;
            if partition_exists(broker, topic.name.as_str(), partition.partition_index) {
                slots.push((t, p, Ok(entries.len())));
                entries.push(CommitEntry {
                    topic: topic.name.to_string(),
                    partition: partition.partition_index,
                    offset: partition.committed_offset,
                    leader_epoch: partition.committed_leader_epoch,
                    metadata: partition
                        .committed_metadata
                        .as_ref()
                        .map(|m| m.to_string())
                        .unwrap_or_default(),
                });
            } else {
                result.error_code = ResponseError::UnknownTopicOrPartition.code();
            }
            topic_response.partitions.push(result);
        }
        response.topics.push(topic_response);
    }
    if entries.is_empty() {
        return response;
    }
    let outcome = broker
        .coordinator
        .commit_offsets(
            request.group_id.as_str(),
            request.generation_id_or_member_epoch,
            request.member_id.as_str(),
            request.group_instance_id.as_ref().map(|s| s.as_str()),
            &entries,
            version,
        )
        .await;
    for (t, p, entry) in slots {
        let Ok(entry) = entry else { continue };
        let result = match &outcome {
            Ok(results) => results[entry],
            // A member's commit to a group that does not exist: GROUP_ID_NOT_FOUND from v9.
            Err(GroupError::GroupIdNotFound) if version < 9 => Err(GroupError::IllegalGeneration),
            Err(error) => Err(*error),
        };
        response.topics[t].partitions[p].error_code = group_code(result);
    }
    response
}

/// One group's committed offsets: the requested partitions (-1 where nothing is committed),
/// or every committed partition when `topics` is `None`.
fn fetch_group(
    broker: &Broker,
    group_id: &str,
    topics: Option<Vec<(String, Vec<i32>)>>,
    member: Option<(&str, i32)>,
) -> (i16, Vec<(String, Vec<OffsetFetchResponsePartitions>)>) {
    let fetched = broker
        .coordinator
        .fetch_offsets(group_id, topics.as_deref(), member);
    let (error, rows) = match fetched {
        Ok(rows) => (0, rows),
        Err(error) => {
            // Each requested partition carries the error too (v1 has no top-level code).
            let code = group_error(error).code();
            let rows = topics
                .unwrap_or_default()
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p, None)))
                .collect();
            return (code, group_rows(rows, code));
        }
    };
    (error, group_rows(rows, 0))
}

fn group_rows(
    rows: Vec<(String, i32, Option<weir_coordinator::records::OffsetValue>)>,
    error_code: i16,
) -> Vec<(String, Vec<OffsetFetchResponsePartitions>)> {
    let mut topics: Vec<(String, Vec<OffsetFetchResponsePartitions>)> = Vec::new();
    for (topic, partition, value) in rows {
        let mut p = OffsetFetchResponsePartitions::default();
        p.partition_index = partition;
        p.error_code = error_code;
        match value {
            Some(v) => {
                p.committed_offset = v.offset;
                p.committed_leader_epoch = v.leader_epoch;
                p.metadata = Some(str_bytes(v.metadata));
            }
            None => {
                p.committed_offset = -1;
                p.committed_leader_epoch = -1;
                p.metadata = Some(str_bytes(""));
            }
        }
        match topics.last_mut() {
            Some((name, partitions)) if *name == topic => partitions.push(p),
            _ => topics.push((topic, vec![p])),
        }
    }
    topics
}

/// OffsetFetch.
pub fn fetch(
    broker: &Arc<Broker>,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let mut response = OffsetFetchResponse::default();
    if version >= 8 {
        response.groups = request
            .groups
            .into_iter()
            .map(|group| {
                let topics = group.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.to_string(), t.partition_indexes))
                        .collect()
                });
                // v9: a consumer-protocol member names itself, and is checked.
                let member = group
                    .member_id
                    .as_ref()
                    .map(|id| (id.as_str(), group.member_epoch));
                let (error_code, rows) =
                    fetch_group(broker, group.group_id.as_str(), topics, member);
                let mut result = OffsetFetchResponseGroup::default();
                result.group_id = group.group_id;
                result.error_code = error_code;
                // A refused group lists no partitions, as Kafka answers.
                let rows = if error_code == 0 { rows } else { Vec::new() };
                result.topics = rows
                    .into_iter()
                    .map(|(name, partitions)| {
                        let mut t = OffsetFetchResponseTopics::default();
                        t.name = TopicName(str_bytes(name));
                        t.partitions = partitions;
                        t
                    })
                    .collect();
                result
            })
            .collect();
        return response;
    }
    let topics = request.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.to_string(), t.partition_indexes))
            .collect()
    });
    let (error_code, rows) = fetch_group(broker, request.group_id.as_str(), topics, None);
    response.error_code = error_code;
    response.topics = rows
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = OffsetFetchResponseTopic::default();
            t.name = TopicName(str_bytes(name));
            t.partitions = partitions
                .into_iter()
                .map(|p| {
                    let mut q = OffsetFetchResponsePartition::default();
                    q.partition_index = p.partition_index;
                    q.committed_offset = p.committed_offset;
                    q.committed_leader_epoch = p.committed_leader_epoch;
                    q.metadata = p.metadata;
                    q.error_code = p.error_code;
                    q
                })
                .collect();
            t
        })
        .collect();
    response
}

/// OffsetDelete.
pub async fn delete(broker: &Arc<Broker>, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
    let group_id: GroupId = request.group_id;
    let partitions: Vec<(String, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.partition_index))
        })
        .collect();
    let mut response = OffsetDeleteResponse::default();
    let results = match broker
        .coordinator
        .delete_offsets(group_id.as_str(), &partitions)
        .await
    {
        Ok(results) => results,
        Err(error) => {
            response.error_code = group_error(error).code();
            return response;
        }
    };
    let mut results = results.into_iter();
    for topic in request.topics {
        let mut t = OffsetDeleteResponseTopic::default();
        for partition in &topic.partitions {
            let mut p = OffsetDeleteResponsePartition::default();
            p.partition_index = partition.partition_index;
            p.error_code =
                if partition_exists(broker, topic.name.as_str(), partition.partition_index) {
                    group_code(results.next().unwrap_or(Ok(())))
                } else {
                    results.next();
                    ResponseError::UnknownTopicOrPartition.code()
                };
            t.partitions.push(p);
        }
        t.name = topic.name;
        response.topics.push(t);
    }
    response
}
