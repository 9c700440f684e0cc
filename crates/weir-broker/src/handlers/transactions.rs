//! Transactions: AddPartitionsToTxn (key 24, v0–3 from producers, v4–5 from brokers: batched,
//! and `verify_only`), AddOffsetsToTxn (25, v0–4), EndTxn (26, v0–5; v5 bumps the epoch),
//! WriteTxnMarkers (27, v1, between brokers), DescribeProducers (61, v0),
//! DescribeTransactions (65, v0) and ListTransactions (66, v0–2). The handlers translate; the transaction coordinator
//! (`weir-coordinator`) decides, and `marker_writer` writes the markers.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as DescribedTransaction,
};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeProducersRequest, DescribeProducersResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnRequest, EndTxnResponse,
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
    WriteTxnMarkersRequest, WriteTxnMarkersResponse,
};
use kafka_protocol::ResponseError;
use weir_coordinator::transaction::records::TxnPartitions;
use weir_coordinator::transaction::state::TxnState;
use weir_coordinator::transaction::{EndOutcome, EndTxn, ProducerIdAndEpoch, TxnError};
use weir_coordinator::{partition_for, OFFSETS_TOPIC};
use weir_log::batch::TxnResult;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;
use weir_metadata::is_internal_topic;

use crate::broker::Broker;
use crate::handlers::errors::txn_error;
use crate::handlers::str_bytes;
use crate::txn_markers::Marker;

/// Most memory a ListTransactions pattern may compile to.
const PATTERN_BYTES_MAX: usize = 1 << 20;

/// The Kafka error for a coordinator refusal at `version`: clients of versions before 2 know
/// a fenced producer as INVALID_PRODUCER_EPOCH.
fn versioned_error(error: TxnError, version: i16) -> ResponseError {
    match txn_error(error) {
        ResponseError::ProducerFenced if version < 2 => ResponseError::InvalidProducerEpoch,
        error => error,
    }
}

/// AddPartitionsToTxn. Versions 0–3 come from a producer, for its one transaction; 4 and 5
/// from brokers, batched over transactions, each either verified only (KIP-890: whether the
/// transaction holds the partitions, nothing changed) or added as a producer's are.
pub async fn add_partitions(
    broker: &Arc<Broker>,
    request: AddPartitionsToTxnRequest,
    version: i16,
    access: &Access,
) -> AddPartitionsToTxnResponse {
    let mut response = AddPartitionsToTxnResponse::default();
    if version <= 3 {
        // A producer needs WRITE on its transactional id and on each topic.
        let producer = ProducerIdAndEpoch {
            producer_id: request.v3_and_below_producer_id.0,
            epoch: request.v3_and_below_producer_epoch,
        };
        let transactional_id = request.v3_and_below_transactional_id.as_str();
        let topics = &request.v3_and_below_topics;
        response.results_by_topic_v3_and_below =
            if !access.transactional_id(AclOperation::Write, transactional_id) {
                topic_results(topics, |_, _| {
                    ResponseError::TransactionalIdAuthorizationFailed.code()
                })
            } else {
                let writable = |topic: &str| access.topic(AclOperation::Write, topic);
                add_to_transaction(
                    broker,
                    transactional_id,
                    producer,
                    topics,
                    (version, &writable),
                )
                .await
            };
        return response;
    }
    // Brokers need CLUSTER_ACTION.
    if !access.cluster(AclOperation::ClusterAction) {
        response.error_code = ResponseError::ClusterAuthorizationFailed.code();
        return response;
    }
    for transaction in &request.transactions {
        let producer = ProducerIdAndEpoch {
            producer_id: transaction.producer_id.0,
            epoch: transaction.producer_epoch,
        };
        let transactional_id = transaction.transactional_id.as_str();
        let mut result = AddPartitionsToTxnResult::default();
        result.transactional_id = transaction.transactional_id.clone();
        result.topic_results = if transaction.verify_only {
            verify_in_transaction(broker, transactional_id, producer, &transaction.topics)
        } else {
            add_to_transaction(
                broker,
                transactional_id,
                producer,
                &transaction.topics,
                (version, &|_| true),
            )
            .await
        };
        response.results_by_transaction.push(result);
    }
    response
}

/// Adds `topics` to the producer's transaction: every partition must exist (else it is
/// UNKNOWN_TOPIC_OR_PARTITION, an internal topic's INVALID_TOPIC_EXCEPTION, and the others
/// OPERATION_NOT_ATTEMPTED, as Kafka answers); then the coordinator adds them all or none.
async fn add_to_transaction(
    broker: &Arc<Broker>,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    topics: &[AddPartitionsToTxnTopic],
    (version, writable): (i16, &(dyn Fn(&str) -> bool + Sync)),
) -> Vec<AddPartitionsToTxnTopicResult> {
    let image = broker.image();
    let mut partitions = TxnPartitions::new();
    let mut refused: Vec<(&str, i32, ResponseError)> = Vec::new();
    for topic in topics {
        let name = topic.name.0.as_str();
        for index in &topic.partitions {
            let known = image
                .topic(name)
                .is_some_and(|t| t.partition(*index).is_some());
            // A broker adds the group's offsets partition for TxnOffsetCommit v5.
            let internal_allowed = version >= 4 && name == OFFSETS_TOPIC;
            if !writable(name) {
                refused.push((name, *index, ResponseError::TopicAuthorizationFailed));
            } else if is_internal_topic(name) && !internal_allowed {
                refused.push((name, *index, ResponseError::InvalidTopicException));
            } else if !known {
                refused.push((name, *index, ResponseError::UnknownTopicOrPartition));
            } else {
                partitions
                    .entry(name.to_string())
                    .or_default()
                    .insert(*index);
            }
        }
    }
    let outcome = if refused.is_empty() {
        broker
            .transactions
            .add_partitions(transactional_id, producer, &partitions)
            .await
            .map_err(|error| versioned_error(error, version))
    } else {
        Err(ResponseError::OperationNotAttempted)
    };
    topic_results(topics, |topic, index| {
        let own = refused
            .iter()
            .find(|(name, i, _)| *name == topic && *i == index)
            .map(|(_, _, error)| *error);
        match (own, outcome) {
            (Some(error), _) | (None, Err(error)) => error.code(),
            (None, Ok(())) => 0,
        }
    })
}

/// Whether the producer's open transaction holds each partition of `topics` (this broker
/// must coordinate its transactional id): TRANSACTION_ABORTABLE for one it does not hold.
fn verify_in_transaction(
    broker: &Broker,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    let partitions: Vec<(&str, i32)> = topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|index| (t.name.0.as_str(), *index)))
        .collect();
    let verified = broker
        .transactions
        .verify(transactional_id, producer, &partitions);
    topic_results(topics, |topic, index| match &verified {
        Err(error) => txn_error(*error).code(),
        Ok(held) => {
            let at = partitions
                .iter()
                .position(|p| *p == (topic, index))
                .unwrap_or(0);
            match held.get(at) {
                Some(true) => 0,
                _ => ResponseError::TransactionAbortable.code(),
            }
        }
    })
}

/// The per-partition results of `topics`, each partition's code from `code(topic, index)`.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    code: impl Fn(&str, i32) -> i16,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|topic| {
            let mut result = AddPartitionsToTxnTopicResult::default();
            result.name = topic.name.clone();
            result.results_by_partition = topic
                .partitions
                .iter()
                .map(|index| {
                    let mut partition = AddPartitionsToTxnPartitionResult::default();
                    partition.partition_index = *index;
                    partition.partition_error_code = code(topic.name.0.as_str(), *index);
                    partition
                })
                .collect();
            result
        })
        .collect()
}

/// AddOffsetsToTxn: the partition of `__consumer_offsets` that holds the group's offsets
/// joins the producer's transaction (created first if the topic is not there yet), so its
/// TxnOffsetCommit is settled by the transaction's markers like any partition of it.
pub async fn add_offsets(
    broker: &Arc<Broker>,
    request: AddOffsetsToTxnRequest,
    version: i16,
    access: &Access,
) -> AddOffsetsToTxnResponse {
    let mut response = AddOffsetsToTxnResponse::default();
    let group_id = request.group_id.as_str();
    if !access.transactional_id(AclOperation::Write, request.transactional_id.as_str()) {
        response.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
        return response;
    }
    if !access.group(AclOperation::Read, group_id) {
        response.error_code = ResponseError::GroupAuthorizationFailed.code();
        return response;
    }
    if group_id.is_empty() {
        response.error_code = ResponseError::InvalidGroupId.code();
        return response;
    }
    if broker
        .ensure_internal_topic(&broker.offsets_topic)
        .await
        .is_err()
    {
        response.error_code = ResponseError::CoordinatorNotAvailable.code();
        return response;
    }
    let partition = partition_for(group_id, broker.offsets_topic.runtime.partitions());
    let mut partitions = TxnPartitions::new();
    partitions
        .entry(OFFSETS_TOPIC.to_string())
        .or_default()
        .insert(partition);
    let producer = ProducerIdAndEpoch {
        producer_id: request.producer_id.0,
        epoch: request.producer_epoch,
    };
    let added = broker
        .transactions
        .add_partitions(request.transactional_id.as_str(), producer, &partitions)
        .await;
    if let Err(error) = added {
        response.error_code = versioned_error(error, version).code();
    }
    response
}

/// EndTxn (transaction protocol version 1): the coordinator prepares the commit or abort and
/// it is answered once stored; the markers are written after, and the transactional id's
/// next transaction waits (CONCURRENT_TRANSACTIONS) until they are.
pub async fn end(
    broker: &Arc<Broker>,
    request: EndTxnRequest,
    version: i16,
    access: &Access,
) -> EndTxnResponse {
    if !access.transactional_id(AclOperation::Write, request.transactional_id.as_str()) {
        let mut response = EndTxnResponse::default();
        response.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
        return response;
    }
    let end = EndTxn {
        transactional_id: request.transactional_id.to_string(),
        producer: ProducerIdAndEpoch {
            producer_id: request.producer_id.0,
            epoch: request.producer_epoch,
        },
        commit: request.committed,
        bump_epoch: version >= 5,
    };
    let mut response = EndTxnResponse::default();
    match end_transaction(broker, &end).await {
        Ok(producer) if version >= 5 => {
            response.producer_id = ProducerId(producer.producer_id);
            response.producer_epoch = producer.epoch;
        }
        Ok(_) => {}
        Err(error) => response.error_code = versioned_error(error, version).code(),
    }
    response
}

/// Ends the transaction as `end` asks, hands its markers to the writer, and returns the
/// producer's id and epoch from now on; a new producer id is reserved when the coordinator
/// needs one (an exhausted epoch bumped).
async fn end_transaction(
    broker: &Arc<Broker>,
    end: &EndTxn,
) -> Result<ProducerIdAndEpoch, TxnError> {
    let mut fresh_id = None;
    loop {
        match broker.transactions.end(end, fresh_id).await? {
            EndOutcome::Ended { markers, producer } => {
                if let Some(markers) = markers {
                    broker.write_markers(markers);
                }
                return Ok(producer);
            }
            EndOutcome::NeedsProducerId if fresh_id.is_none() => {
                let id = broker.next_producer_id().await.map_err(|error| {
                    tracing::warn!(target: "weir::transactions", %error, "no producer id for an exhausted epoch");
                    TxnError::CoordinatorNotAvailable
                })?;
                fresh_id = Some(id);
            }
            // The id it was given went to a concurrent request: the client retries.
            EndOutcome::NeedsProducerId => return Err(TxnError::ConcurrentTransactions),
        }
    }
}

/// WriteTxnMarkers from a transaction coordinator: each marker appended on each of its
/// partitions this broker leads, answered once as safe as an `acks=all` write.
pub async fn write_markers(
    broker: &Arc<Broker>,
    request: WriteTxnMarkersRequest,
    access: &Access,
) -> WriteTxnMarkersResponse {
    let mut response = WriteTxnMarkersResponse::default();
    // Only brokers write markers: CLUSTER_ACTION, or every partition is refused.
    let allowed = access.cluster(AclOperation::ClusterAction);
    for writable in request.markers {
        let marker = Marker {
            producer_id: writable.producer_id.0,
            producer_epoch: writable.producer_epoch,
            result: TxnResult::of_commit(writable.transaction_result),
            coordinator_epoch: writable.coordinator_epoch,
        };
        let partitions: Vec<(String, i32)> = writable
            .topics
            .iter()
            .flat_map(|topic| {
                let name = topic.name.0.to_string();
                topic
                    .partition_indexes
                    .iter()
                    .map(move |index| (name.clone(), *index))
            })
            .collect();
        let results = match allowed {
            true => broker.write_marker_batch(&partitions, marker).await,
            false => vec![Err(ResponseError::ClusterAuthorizationFailed); partitions.len()],
        };
        let mut result = WritableTxnMarkerResult::default();
        result.producer_id = writable.producer_id;
        let mut outcomes = partitions.iter().zip(results);
        result.topics = writable
            .topics
            .iter()
            .map(|topic| {
                let mut topic_result = WritableTxnMarkerTopicResult::default();
                topic_result.name = topic.name.clone();
                topic_result.partitions = topic
                    .partition_indexes
                    .iter()
                    .map(|index| {
                        let outcome = outcomes.next().map(|(_, outcome)| outcome);
                        let mut partition = WritableTxnMarkerPartitionResult::default();
                        partition.partition_index = *index;
                        partition.error_code = match outcome {
                            Some(Ok(())) => 0,
                            Some(Err(error)) => error.code(),
                            None => ResponseError::UnknownServerError.code(),
                        };
                        partition
                    })
                    .collect();
                topic_result
            })
            .collect();
        response.markers.push(result);
    }
    response
}

/// DescribeTransactions: each transactional id as its coordinator (this broker) holds it;
/// TRANSACTIONAL_ID_NOT_FOUND for one it does not know, NOT_COORDINATOR for one another broker
/// coordinates.
pub fn describe(
    broker: &Broker,
    request: DescribeTransactionsRequest,
    access: &Access,
) -> DescribeTransactionsResponse {
    let mut response = DescribeTransactionsResponse::default();
    response.transaction_states = request
        .transactional_ids
        .into_iter()
        .map(|transactional_id| {
            // An id refused is answered with its error and zeros, as Kafka answers it.
            let mut described = DescribedTransaction::default();
            let allowed =
                access.transactional_id(AclOperation::Describe, transactional_id.as_str());
            let found = match allowed {
                true => broker.transactions.describe(transactional_id.as_str()),
                false => Ok(None),
            };
            match found {
                _ if !allowed => {
                    described.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
                }
                Ok(Some(txn)) => {
                    described.transaction_state = str_bytes(txn.state.name());
                    described.transaction_timeout_ms = txn.timeout_ms;
                    described.transaction_start_time_ms = txn.start_ms;
                    described.producer_id = ProducerId(txn.producer_id);
                    described.producer_epoch = txn.producer_epoch;
                    // Only the topics the client may describe are named.
                    described.topics = txn
                        .partitions
                        .into_iter()
                        .filter(|(topic, _)| access.topic(AclOperation::Describe, topic))
                        .map(|(topic, partitions)| {
                            let mut data = TopicData::default();
                            data.topic = TopicName(str_bytes(topic));
                            data.partitions = partitions.into_iter().collect();
                            data
                        })
                        .collect();
                }
                Ok(None) => {
                    described.error_code = ResponseError::TransactionalIdNotFound.code();
                }
                Err(error) => described.error_code = txn_error(error).code(),
            }
            described.transactional_id = transactional_id;
            described
        })
        .collect();
    response
}

/// ListTransactions: the transactional ids this broker coordinates, filtered by state, producer
/// id, how long their transaction has run (v1: longer than the filter) and a pattern over the id (v2, a regular
/// expression that must match the whole id, as Java's `matches`).
pub fn list(
    broker: &Broker,
    request: ListTransactionsRequest,
    version: i16,
    access: &Access,
) -> ListTransactionsResponse {
    let mut response = ListTransactionsResponse::default();
    let mut states = Vec::new();
    for name in &request.state_filters {
        match TxnState::from_name(name.as_str()) {
            Some(state) => states.push(state),
            None => response.unknown_state_filters.push(name.clone()),
        }
    }
    let pattern = match request
        .transactional_id_pattern
        .as_ref()
        .filter(|_| version >= 2)
    {
        Some(pattern) if !pattern.is_empty() => {
            // Compiled within a bound: a pattern is a client's input.
            let compiled = regex::RegexBuilder::new(&format!("^(?:{})$", pattern.as_str()))
                .size_limit(PATTERN_BYTES_MAX)
                .build();
            match compiled {
                Ok(pattern) => Some(pattern),
                Err(_) => {
                    response.error_code = ResponseError::InvalidRegularExpression.code();
                    return response;
                }
            }
        }
        _ => None,
    };
    let now_ms = broker.partitions.clock().now_ms();
    let running_longer_than =
        (version >= 1 && request.duration_filter >= 0).then_some(request.duration_filter);
    response.transaction_states = broker
        .transactions
        .list()
        .into_iter()
        .filter(|txn| access.transactional_id(AclOperation::Describe, &txn.transactional_id))
        .filter(|txn| states.is_empty() || states.contains(&txn.state))
        .filter(|txn| {
            request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .contains(&ProducerId(txn.producer_id))
        })
        // As Kafka filters: an id with no transaction begun (start -1) counts as running
        // since ever.
        .filter(|txn| {
            running_longer_than
                .is_none_or(|duration| now_ms.saturating_sub(txn.start_ms) > duration)
        })
        .filter(|txn| {
            pattern
                .as_ref()
                .is_none_or(|p| p.is_match(&txn.transactional_id))
        })
        .map(|txn| {
            let mut listed = ListedTransaction::default();
            listed.transactional_id = TransactionalId(str_bytes(txn.transactional_id));
            listed.producer_id = ProducerId(txn.producer_id);
            listed.transaction_state = str_bytes(txn.state.name());
            listed
        })
        .collect();
    response
}

/// DescribeProducers: the producers each partition (led here) tracks, with the first offset
/// of a transaction each has open there, so `kafka-transactions find-hanging` finds
/// transactions nobody will end and `abort` can end them with a marker.
pub fn describe_producers(
    broker: &Broker,
    request: DescribeProducersRequest,
    access: &Access,
) -> DescribeProducersResponse {
    let mut response = DescribeProducersResponse::default();
    response.topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let mut topic_response = TopicResponse::default();
            topic_response.partitions = topic
                .partition_indexes
                .iter()
                .map(|index| {
                    let mut partition = PartitionResponse::default();
                    partition.partition_index = *index;
                    let led = match access.topic(AclOperation::Read, topic.name.0.as_str()) {
                        true => super::led_partition(broker, topic.name.0.as_str(), *index),
                        false => Err(ResponseError::TopicAuthorizationFailed),
                    };
                    match led {
                        Ok(led) => {
                            partition.active_producers = led
                                .log()
                                .active_producers()
                                .into_iter()
                                .map(|producer| {
                                    let mut state = ProducerState::default();
                                    state.producer_id = ProducerId(producer.producer_id);
                                    state.producer_epoch = i32::from(producer.epoch);
                                    state.last_sequence = producer.last_sequence;
                                    state.last_timestamp = producer.last_timestamp;
                                    state.coordinator_epoch = producer.coordinator_epoch;
                                    state.current_txn_start_offset =
                                        producer.ongoing_first_offset.unwrap_or(-1);
                                    state
                                })
                                .collect();
                        }
                        Err(error) => partition.error_code = error.code(),
                    }
                    partition
                })
                .collect();
            topic_response.name = topic.name;
            topic_response
        })
        .collect();
    response
}
