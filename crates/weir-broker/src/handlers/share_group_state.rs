//! The share coordinator's APIs (KIP-932), which partition leaders send it for the durable
//! state of their share-partitions: InitializeShareGroupState (83), ReadShareGroupState (84),
//! WriteShareGroupState (85), DeleteShareGroupState (86) and ReadShareGroupStateSummary (87),
//! each v0 (the summary v0–1: v1 adds the delivery-complete count). Only brokers send them:
//! CLUSTER_ACTION, or every partition is refused CLUSTER_AUTHORIZATION_FAILED. Each partition is answered by this broker's share
//! coordinator, or NOT_COORDINATOR when another broker leads the key's partition of
//! `__share_group_state`.

use std::sync::Arc;

use kafka_protocol::messages::{
    delete_share_group_state_response, initialize_share_group_state_response,
    read_share_group_state_response, read_share_group_state_summary_response,
    write_share_group_state_response, DeleteShareGroupStateRequest, DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest, InitializeShareGroupStateResponse,
    ReadShareGroupStateRequest, ReadShareGroupStateResponse, ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse, WriteShareGroupStateRequest, WriteShareGroupStateResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;
use weir_coordinator::share_coordinator::records::SharePartitionKey;
use weir_coordinator::share_coordinator::StateWrite;
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;

use crate::broker::Broker;
use crate::handlers::errors::share_state_error;

/// A state batch of the share-group state APIs (any of their generated `StateBatch` types) as
/// the coordinator keeps it.
macro_rules! persisted_batch {
    ($batch:expr) => {
        weir_coordinator::share_coordinator::records::PersistedBatch {
            first_offset: $batch.first_offset,
            last_offset: $batch.last_offset,
            delivery_state: $batch.delivery_state,
            delivery_count: $batch.delivery_count,
        }
    };
}
pub(crate) use persisted_batch;

/// A kept state batch as the generated `StateBatch` type `$wire`.
macro_rules! wire_batch {
    ($wire:ty, $batch:expr) => {{
        let mut wire = <$wire>::default();
        wire.first_offset = $batch.first_offset;
        wire.last_offset = $batch.last_offset;
        wire.delivery_state = $batch.delivery_state;
        wire.delivery_count = $batch.delivery_count;
        wire
    }};
}
pub(crate) use wire_batch;

/// The key of `partition` of `topic_id` in `group`.
fn key(group: &StrBytes, topic_id: Uuid, partition: i32) -> SharePartitionKey {
    SharePartitionKey {
        group: group.to_string(),
        topic_id,
        partition,
    }
}

/// A partition's error code and message: 0 and none when it succeeded.
fn outcome<T>(result: &Result<T, ResponseError>) -> (i16, Option<StrBytes>) {
    match result {
        Ok(_) => (0, None),
        Err(error) => (error.code(), Some(StrBytes::from_string(error.to_string()))),
    }
}

/// Whether the client may send share-state requests (brokers only).
fn allowed(access: &Access) -> Result<(), ResponseError> {
    if access.cluster(AclOperation::ClusterAction) {
        Ok(())
    } else {
        Err(ResponseError::ClusterAuthorizationFailed)
    }
}

/// InitializeShareGroupState: each share-partition's state starts anew.
pub async fn initialize(
    broker: &Arc<Broker>,
    request: InitializeShareGroupStateRequest,
    access: &Access,
) -> InitializeShareGroupStateResponse {
    let mut response = InitializeShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = initialize_share_group_state_response::InitializeStateResult::default();
        result.topic_id = topic.topic_id;
        for partition in topic.partitions {
            let done = match allowed(access) {
                Ok(()) => broker
                    .share_coordinator
                    .initialize(
                        &key(&request.group_id, topic.topic_id, partition.partition),
                        partition.state_epoch,
                        partition.start_offset,
                    )
                    .await
                    .map_err(share_state_error),
                Err(error) => Err(error),
            };
            let mut answer = initialize_share_group_state_response::PartitionResult::default();
            answer.partition = partition.partition;
            (answer.error_code, answer.error_message) = outcome(&done);
            result.partitions.push(answer);
        }
        response.results.push(result);
    }
    response
}

/// ReadShareGroupState: each share-partition's state, for the leader of the epoch given.
pub async fn read(
    broker: &Arc<Broker>,
    request: ReadShareGroupStateRequest,
    access: &Access,
) -> ReadShareGroupStateResponse {
    let mut response = ReadShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = read_share_group_state_response::ReadStateResult::default();
        result.topic_id = topic.topic_id;
        for partition in topic.partitions {
            let read = match allowed(access) {
                Ok(()) => broker
                    .share_coordinator
                    .read(
                        &key(&request.group_id, topic.topic_id, partition.partition),
                        partition.leader_epoch,
                    )
                    .await
                    .map_err(share_state_error),
                Err(error) => Err(error),
            };
            let mut answer = read_share_group_state_response::PartitionResult::default();
            answer.partition = partition.partition;
            (answer.error_code, answer.error_message) = outcome(&read);
            answer.start_offset = -1;
            if let Ok(state) = read {
                answer.state_epoch = state.state_epoch;
                answer.start_offset = state.start_offset;
                answer.state_batches = state
                    .batches
                    .iter()
                    .map(|b| wire_batch!(read_share_group_state_response::StateBatch, b))
                    .collect();
            }
            result.partitions.push(answer);
        }
        response.results.push(result);
    }
    response
}

/// WriteShareGroupState: each share-partition's changed batches, stored before the answer.
pub async fn write(
    broker: &Arc<Broker>,
    request: WriteShareGroupStateRequest,
    access: &Access,
) -> WriteShareGroupStateResponse {
    let mut response = WriteShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = write_share_group_state_response::WriteStateResult::default();
        result.topic_id = topic.topic_id;
        for partition in topic.partitions {
            let write = StateWrite {
                state_epoch: partition.state_epoch,
                leader_epoch: partition.leader_epoch,
                start_offset: partition.start_offset,
                batches: partition
                    .state_batches
                    .iter()
                    .map(|b| persisted_batch!(b))
                    .collect(),
            };
            let done = match allowed(access) {
                Ok(()) => broker
                    .share_coordinator
                    .write(
                        &key(&request.group_id, topic.topic_id, partition.partition),
                        &write,
                    )
                    .await
                    .map_err(share_state_error),
                Err(error) => Err(error),
            };
            let mut answer = write_share_group_state_response::PartitionResult::default();
            answer.partition = partition.partition;
            (answer.error_code, answer.error_message) = outcome(&done);
            result.partitions.push(answer);
        }
        response.results.push(result);
    }
    response
}

/// DeleteShareGroupState: each share-partition's state is forgotten.
pub async fn delete(
    broker: &Arc<Broker>,
    request: DeleteShareGroupStateRequest,
    access: &Access,
) -> DeleteShareGroupStateResponse {
    let mut response = DeleteShareGroupStateResponse::default();
    for topic in request.topics {
        let mut result = delete_share_group_state_response::DeleteStateResult::default();
        result.topic_id = topic.topic_id;
        for partition in topic.partitions {
            let done = match allowed(access) {
                Ok(()) => broker
                    .share_coordinator
                    .delete(&key(&request.group_id, topic.topic_id, partition.partition))
                    .await
                    .map_err(share_state_error),
                Err(error) => Err(error),
            };
            let mut answer = delete_share_group_state_response::PartitionResult::default();
            answer.partition = partition.partition;
            (answer.error_code, answer.error_message) = outcome(&done);
            result.partitions.push(answer);
        }
        response.results.push(result);
    }
    response
}

/// ReadShareGroupStateSummary: each share-partition's epochs and start offset.
pub fn read_summary(
    broker: &Broker,
    request: ReadShareGroupStateSummaryRequest,
    access: &Access,
) -> ReadShareGroupStateSummaryResponse {
    let mut response = ReadShareGroupStateSummaryResponse::default();
    for topic in request.topics {
        let mut result = read_share_group_state_summary_response::ReadStateSummaryResult::default();
        result.topic_id = topic.topic_id;
        for partition in topic.partitions {
            let summary = allowed(access).and_then(|()| {
                broker
                    .share_coordinator
                    .read_summary(&key(&request.group_id, topic.topic_id, partition.partition))
                    .map_err(share_state_error)
            });
            let mut answer = read_share_group_state_summary_response::PartitionResult::default();
            answer.partition = partition.partition;
            (answer.error_code, answer.error_message) = outcome(&summary);
            answer.start_offset = -1;
            answer.leader_epoch = -1;
            if let Ok(summary) = summary {
                answer.state_epoch = summary.state_epoch;
                answer.leader_epoch = summary.leader_epoch;
                answer.start_offset = summary.start_offset;
                answer.delivery_complete_count = summary.delivery_complete_count;
            }
            result.partitions.push(answer);
        }
        response.results.push(result);
    }
    response
}
