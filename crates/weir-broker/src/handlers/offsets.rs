//! Committed offsets: OffsetCommit (key 8, v2–9; from v9 the generation is a consumer-protocol
//! member's epoch), TxnOffsetCommit (key 28, v0–5: offsets in a producer's transaction, verified with its
//! transaction coordinator; from v5 added to the transaction by it),
//! OffsetFetch (key 9, v1–9, one group per request below v8, many from v8; v9 names the
//! member; from v7 `require_stable`) and OffsetDelete (key 47, v0). Offsets for partitions
//! that do not exist are refused with UNKNOWN_TOPIC_OR_PARTITION and change nothing.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
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
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    GroupId, OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName, TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;
use weir_coordinator::{
    partition_for, CommitEntry, FetchedOffset, GroupError, ProducerIdAndEpoch, TxnCommit,
    OFFSETS_TOPIC,
};
use weir_log::VerificationGuard;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;

use crate::broker::Broker;
use crate::handlers::errors::{group_code, group_error};
use crate::handlers::str_bytes;
use crate::txn_verification::{guard_after, guard_before, GuardBefore, TxnCheck};

fn partition_exists(broker: &Broker, topic: &str, partition: i32) -> bool {
    broker
        .image()
        .topic(topic)
        .is_some_and(|t| (0..t.partition_count()).contains(&partition))
}

/// A topic of an OffsetCommit or TxnOffsetCommit request.
trait CommitTopic {
    type Partition: CommitPartition;
    fn name(&self) -> &TopicName;
    fn partitions(&self) -> &[Self::Partition];
}

/// A partition of an OffsetCommit or TxnOffsetCommit request.
trait CommitPartition {
    /// Partition index, offset, leader epoch and metadata.
    fn fields(&self) -> (i32, i64, i32, Option<&str>);
}

/// Implements [`CommitTopic`] and [`CommitPartition`] for a request's topic and partition
/// types, which have the same fields.
macro_rules! commit_request {
    ($topic:ty, $partition:ty) => {
        impl CommitTopic for $topic {
            type Partition = $partition;
            fn name(&self) -> &TopicName {
                &self.name
            }
            fn partitions(&self) -> &[$partition] {
                &self.partitions
            }
        }

        impl CommitPartition for $partition {
            fn fields(&self) -> (i32, i64, i32, Option<&str>) {
                let metadata = self.committed_metadata.as_ref().map(|m| m.as_str());
                (
                    self.partition_index,
                    self.committed_offset,
                    self.committed_leader_epoch,
                    metadata,
                )
            }
        }
    };
}

commit_request!(OffsetCommitRequestTopic, OffsetCommitRequestPartition);
commit_request!(TxnOffsetCommitRequestTopic, TxnOffsetCommitRequestPartition);

/// One partition of a commit request: its topic, its index, and the entry the coordinator
/// takes for it (or why it was refused here).
type CommitSlot = (TopicName, i32, Result<usize, ResponseError>);

/// A commit request's partitions as the coordinator takes them: an entry for each that
/// exists, and every partition in request order.
struct CommitSlots {
    entries: Vec<CommitEntry>,
    slots: Vec<CommitSlot>,
}

impl CommitSlots {
    /// Reads a request's `topics`: partitions of a topic `refuse` names an error for are
    /// refused with it, and those that do not exist with UNKNOWN_TOPIC_OR_PARTITION.
    fn read<T: CommitTopic>(
        broker: &Broker,
        topics: &[T],
        refuse: impl Fn(&str) -> Option<ResponseError>,
    ) -> CommitSlots {
        let mut entries = Vec::new();
        let mut slots = Vec::new();
        for topic in topics {
            let name = topic.name();
            let refusal = refuse(name.as_str());
            for partition in topic.partitions() {
                let (index, offset, leader_epoch, metadata) = partition.fields();
                if let Some(error) = refusal {
                    slots.push((name.clone(), index, Err(error)));
                } else if partition_exists(broker, name.as_str(), index) {
                    slots.push((name.clone(), index, Ok(entries.len())));
                    entries.push(CommitEntry {
                        topic: name.to_string(),
                        partition: index,
                        offset,
                        leader_epoch,
                        metadata: metadata.unwrap_or_default().to_string(),
                    });
                } else {
                    slots.push((
                        name.clone(),
                        index,
                        Err(ResponseError::UnknownTopicOrPartition),
                    ));
                }
            }
        }
        CommitSlots { entries, slots }
    }

    /// The answer's topics, each partition with its error code given what the coordinator
    /// answered (or the error refusing the whole request): the partitions
    /// refused here first, then the others, each in request order and grouped by topic, as
    /// Kafka answers; `topic` and `partition` make the response's types.
    fn answer<T, P>(
        self,
        outcome: &Result<Vec<Result<(), GroupError>>, ResponseError>,
        topic: impl Fn(TopicName, Vec<P>) -> T,
        partition: impl Fn(i32, i16) -> P,
    ) -> Vec<T> {
        let (refused, taken): (Vec<CommitSlot>, Vec<CommitSlot>) =
            self.slots.into_iter().partition(|slot| slot.2.is_err());
        let mut topics: Vec<(TopicName, Vec<P>)> = Vec::new();
        let mut positions: HashMap<TopicName, usize> = HashMap::new();
        for (name, index, entry) in refused.into_iter().chain(taken) {
            let code = match (entry, outcome) {
                (Err(refused), _) => refused.code(),
                (Ok(entry), Ok(results)) => group_code(results[entry]),
                (Ok(_), Err(error)) => error.code(),
            };
            let answered = partition(index, code);
            match positions.get(&name) {
                Some(&at) => topics[at].1.push(answered),
                None => {
                    positions.insert(name.clone(), topics.len());
                    topics.push((name, vec![answered]));
                }
            }
        }
        topics
            .into_iter()
            .map(|(name, partitions)| topic(name, partitions))
            .collect()
    }
}

/// OffsetCommit: every known partition's offset is stored in one batch; the answer waits
/// until it is durable.
pub async fn commit(
    broker: &Arc<Broker>,
    request: OffsetCommitRequest,
    version: i16,
    access: &Access,
) -> OffsetCommitResponse {
    // READ on the group, then on each topic.
    let group_allowed = access.group(AclOperation::Read, request.group_id.as_str());
    let read = CommitSlots::read(broker, &request.topics, |topic| match group_allowed {
        false => Some(ResponseError::GroupAuthorizationFailed),
        true => (!access.topic(AclOperation::Read, topic))
            .then_some(ResponseError::TopicAuthorizationFailed),
    });
    let outcome = if read.entries.is_empty() {
        Ok(Vec::new())
    } else {
        broker
            .coordinator
            .commit_offsets(
                request.group_id.as_str(),
                request.generation_id_or_member_epoch,
                request.member_id.as_str(),
                request.group_instance_id.as_ref().map(|s| s.as_str()),
                &read.entries,
                version,
            )
            .await
    };
    let mut response = OffsetCommitResponse::default();
    // A member's commit to a group that does not exist: GROUP_ID_NOT_FOUND from v9.
    let outcome = outcome.map_err(|error| match error {
        GroupError::GroupIdNotFound if version < 9 => ResponseError::IllegalGeneration,
        error => group_error(error),
    });
    response.topics = read.answer(
        &outcome,
        |name, partitions| {
            let mut t = OffsetCommitResponseTopic::default();
            t.name = name;
            t.partitions = partitions;
            t
        },
        |index, code| {
            let mut p = OffsetCommitResponsePartition::default();
            p.partition_index = index;
            p.error_code = code;
            p
        },
    );
    response
}

/// TxnOffsetCommit: the known partitions' offsets are stored in the producer's transaction in
/// one batch, answered once durable; they count once the transaction commits. The batch that
/// opens the transaction on the group's partition of `__consumer_offsets` is written only once
/// the transaction coordinator confirmed the transaction holds that partition (KIP-890), so a
/// producer that never added it cannot hold the group's offsets back.
pub async fn commit_transactional(
    broker: &Arc<Broker>,
    request: TxnOffsetCommitRequest,
    version: i16,
    access: &Access,
) -> TxnOffsetCommitResponse {
    // WRITE on the transactional id, READ on the group, then on each topic.
    let whole = if !access.transactional_id(AclOperation::Write, request.transactional_id.as_str())
    {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !access.group(AclOperation::Read, request.group_id.as_str()) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        None
    };
    let read = CommitSlots::read(broker, &request.topics, |topic| {
        whole.or_else(|| {
            (!access.topic(AclOperation::Read, topic))
                .then_some(ResponseError::TopicAuthorizationFailed)
        })
    });
    let producer = ProducerIdAndEpoch {
        producer_id: request.producer_id.0,
        epoch: request.producer_epoch,
    };
    let outcome = if read.entries.is_empty() {
        Ok(Vec::new())
    } else {
        match verify_offsets_partition(broker, &request, producer, version).await {
            Err(error) => Err(error),
            Ok(verification) => {
                let commit = TxnCommit {
                    group_id: request.group_id.as_str(),
                    producer,
                    generation: request.generation_id,
                    member_id: request.member_id.as_str(),
                    instance_id: request.group_instance_id.as_ref().map(|s| s.as_str()),
                    verification: verification.map(VerificationGuard::value),
                };
                broker
                    .coordinator
                    .commit_transactional_offsets(commit, &read.entries)
                    .await
                    .map_err(|error| match error {
                        GroupError::NotInTransaction => not_in_transaction(version),
                        error => group_error(error),
                    })
            }
        }
    };
    let mut response = TxnOffsetCommitResponse::default();
    response.topics = read.answer(
        &outcome,
        |name, partitions| {
            let mut t = TxnOffsetCommitResponseTopic::default();
            t.name = name;
            t.partitions = partitions;
            t
        },
        |index, code| {
            let mut p = TxnOffsetCommitResponsePartition::default();
            p.partition_index = index;
            p.error_code = code;
            p
        },
    );
    response
}

/// Asks the transaction coordinator whether the producer's transaction holds the group's
/// partition of `__consumer_offsets`, unless the transaction is open there already; returns
/// the guard the commit's batch needs (`None`: none needed), or the error to answer with, as
/// Kafka answers a client of `version`.
async fn verify_offsets_partition(
    broker: &Arc<Broker>,
    request: &TxnOffsetCommitRequest,
    producer: ProducerIdAndEpoch,
    version: i16,
) -> Result<Option<VerificationGuard>, ResponseError> {
    let index = partition_for(
        request.group_id.as_str(),
        broker.offsets_topic.runtime.partitions(),
    );
    // Not led here: the coordinator refuses the commit as it stands.
    let Ok(partition) = super::led_partition(broker, OFFSETS_TOPIC, index) else {
        return Ok(None);
    };
    // TxnOffsetCommit v5 (transaction protocol version 2): no AddOffsetsToTxn came first.
    let check = match version {
        5.. => TxnCheck::Add,
        _ => TxnCheck::Verify,
    };
    let guard = match guard_before(&partition, producer, check) {
        GuardBefore::InTransaction => return Ok(None),
        GuardBefore::Taken(guard) => Some(guard),
        GuardBefore::After => None,
    };
    if !broker.config.transaction_partition_verification_enable {
        return Ok(guard.or_else(|| guard_after(&partition, producer)));
    }
    let verified = broker
        .check_in_transaction(
            request.transactional_id.as_str(),
            producer,
            &[(OFFSETS_TOPIC, index)],
            check,
        )
        .await;
    match verified.into_iter().next().unwrap_or(Ok(())) {
        Ok(()) => Ok(guard.or_else(|| guard_after(&partition, producer))),
        Err(ResponseError::TransactionAbortable) => Err(not_in_transaction(version)),
        Err(ResponseError::ProducerFenced) => Err(ResponseError::InvalidProducerEpoch),
        // The coordinator could not answer now: the client retries without a new lookup.
        Err(
            ResponseError::NetworkException
            | ResponseError::ConcurrentTransactions
            | ResponseError::CoordinatorNotAvailable
            | ResponseError::NotCoordinator
            | ResponseError::CoordinatorLoadInProgress,
        ) => Err(ResponseError::CoordinatorLoadInProgress),
        Err(error) => Err(error),
    }
}

/// A transactional commit whose transaction does not hold the group's partition:
/// TRANSACTION_ABORTABLE for clients of version 4 on, INVALID_TXN_STATE before.
fn not_in_transaction(version: i16) -> ResponseError {
    match version {
        4.. => ResponseError::TransactionAbortable,
        _ => ResponseError::InvalidTxnState,
    }
}

/// One group's committed offsets: the requested partitions (-1 where nothing is committed),
/// or every committed partition when `topics` is `None`. The client needs DESCRIBE on the
/// group, and on a topic to see its offsets: a topic it may not describe is
/// TOPIC_AUTHORIZATION_FAILED when named, and left out when all are asked for, as in Kafka.
fn fetch_group(
    broker: &Broker,
    (group_id, access): (&str, &Access),
    topics: Option<Vec<(String, Vec<i32>)>>,
    member: Option<(&str, i32)>,
    require_stable: bool,
) -> (i16, Vec<(String, Vec<OffsetFetchResponsePartitions>)>) {
    let fetched = match access.group(AclOperation::Describe, group_id) {
        true => broker
            .coordinator
            .fetch_offsets(group_id, topics.as_deref(), member, require_stable)
            .map_err(|error| group_error(error).code()),
        false => Err(ResponseError::GroupAuthorizationFailed.code()),
    };
    let named = topics.is_some();
    let rows = match fetched {
        Ok(rows) => rows,
        Err(code) => {
            // Each requested partition carries the error too (v1 has no top-level code).
            let rows = topics
                .unwrap_or_default()
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p, Ok(None))))
                .collect();
            return (code, group_rows(rows, code));
        }
    };
    let rows = group_rows(rows, 0)
        .into_iter()
        .filter_map(|(topic, mut partitions)| {
            if access.topic(AclOperation::Describe, &topic) {
                return Some((topic, partitions));
            }
            for p in &mut partitions {
                p.error_code = ResponseError::TopicAuthorizationFailed.code();
                p.committed_offset = -1;
                p.committed_leader_epoch = -1;
                p.metadata = Some(str_bytes(""));
            }
            named.then_some((topic, partitions))
        })
        .collect();
    (0, rows)
}

fn group_rows(
    rows: Vec<FetchedOffset>,
    error_code: i16,
) -> Vec<(String, Vec<OffsetFetchResponsePartitions>)> {
    let mut topics: Vec<(String, Vec<OffsetFetchResponsePartitions>)> = Vec::new();
    for (topic, partition, value) in rows {
        let mut p = OffsetFetchResponsePartitions::default();
        p.partition_index = partition;
        p.error_code = error_code;
        // UNSTABLE_OFFSET_COMMIT: the partition's own error, offset -1.
        let value = value.unwrap_or_else(|error| {
            p.error_code = group_error(error).code();
            None
        });
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
    access: &Access,
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
                let (error_code, rows) = fetch_group(
                    broker,
                    (group.group_id.as_str(), access),
                    topics,
                    member,
                    request.require_stable,
                );
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
    let (error_code, rows) = fetch_group(
        broker,
        (request.group_id.as_str(), access),
        topics,
        None,
        request.require_stable,
    );
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
pub async fn delete(
    broker: &Arc<Broker>,
    request: OffsetDeleteRequest,
    access: &Access,
) -> OffsetDeleteResponse {
    let group_id: GroupId = request.group_id;
    if !access.group(AclOperation::Delete, group_id.as_str()) {
        let mut response = OffsetDeleteResponse::default();
        response.error_code = ResponseError::GroupAuthorizationFailed.code();
        return response;
    }
    // Partitions of topics the client may not read are refused and left alone.
    let readable = |topic: &str| access.topic(AclOperation::Read, topic);
    let partitions: Vec<(String, i32)> = request
        .topics
        .iter()
        .filter(|t| readable(t.name.as_str()))
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
            p.error_code = if !readable(topic.name.as_str()) {
                ResponseError::TopicAuthorizationFailed.code()
            } else if partition_exists(broker, topic.name.as_str(), partition.partition_index) {
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
