//! A share-partition leader's calls to the share coordinator (Kafka's persister): the durable
//! state of a share-partition is read when the leader first serves it at a leader epoch
//! (initialized at the log end when there is none), and written after each change the leader
//! makes (acknowledgements, releases, expired locks), before the change is answered. The
//! coordinator is the leader of the key's `__share_group_state` partition: this broker's own
//! [`ShareCoordinator`](weir_coordinator::share_coordinator::ShareCoordinator), or another
//! broker's through its ReadShareGroupState, InitializeShareGroupState and
//! WriteShareGroupState. Retriable failures (the coordinator moving or loading) are retried
//! for a few seconds.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    initialize_share_group_state_request, read_share_group_state_request,
    read_share_group_state_summary_request, write_share_group_state_request, ApiKey,
    InitializeShareGroupStateRequest, InitializeShareGroupStateResponse,
    ReadShareGroupStateRequest, ReadShareGroupStateResponse, ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse, WriteShareGroupStateRequest, WriteShareGroupStateResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError;
use weir_client::Connection;
use weir_coordinator::share_coordinator::records::{PersistedBatch, SharePartitionKey};
use weir_coordinator::share_coordinator::{PersistedState, StateSummary, StateWrite};
use weir_coordinator::share_partition::{RecordState, ShareState, StateBatch};
use weir_metadata::SHARE_GROUP_STATE_TOPIC;

use crate::broker::Broker;
use crate::endpoints::ClientEndpoint;
use crate::handlers::errors::share_state_error;
use crate::handlers::groups::key_leader;
use crate::handlers::share_group_state::{persisted_batch, wire_batch};
use crate::handlers::str_bytes;

/// Tries of a share-state call whose failure is retriable.
const ATTEMPTS: u32 = 8;
/// The wait before the first retry, doubled for each next one (about 5 s in all).
const FIRST_BACKOFF: Duration = Duration::from_millis(40);

/// One call to a share coordinator.
#[derive(Debug, Clone, Copy)]
enum StateCall<'a> {
    /// ReadShareGroupState as the leader of this leader epoch.
    Read(i32),
    /// InitializeShareGroupState at (state epoch, start offset).
    Initialize(i32, i64),
    /// WriteShareGroupState.
    Write(&'a StateWrite),
    /// ReadShareGroupStateSummary.
    Summary,
}

/// What a share coordinator answered.
enum StateAnswer {
    /// Done (an initialize or a write).
    Done,
    /// A read's state.
    State(PersistedState),
    /// A summary.
    Summary(StateSummary),
}

/// The ReadShareGroupStateSummary version brokers send (v1 carries the delivery-complete
/// count); the other share-state APIs are sent at v0.
const SUMMARY_API_VERSION: i16 = 1;

/// Whether a share-state call that failed so is worth trying again.
fn retriable(error: ResponseError) -> bool {
    matches!(
        error,
        ResponseError::CoordinatorNotAvailable
            | ResponseError::NotCoordinator
            | ResponseError::CoordinatorLoadInProgress
            | ResponseError::NetworkException
            | ResponseError::RequestTimedOut
    )
}

impl Broker {
    /// The durable state of `key` for this broker as its leader at `leader_epoch` (which
    /// fences older leaders' writes from then on); start offset -1 when it has none.
    pub(crate) async fn read_share_state(
        self: &Arc<Self>,
        key: &SharePartitionKey,
        leader_epoch: i32,
    ) -> Result<PersistedState, ResponseError> {
        match self
            .share_state_call(key, StateCall::Read(leader_epoch))
            .await?
        {
            StateAnswer::State(state) => Ok(state),
            // Never: a read is answered with a state. Not taken as "no state", which would
            // start the share-partition anew.
            StateAnswer::Done | StateAnswer::Summary(_) => Err(ResponseError::UnknownServerError),
        }
    }

    /// The start offset, epochs and delivery-complete count of `key`'s durable state (start
    /// offset -1 when it has none); fences nothing.
    pub(crate) async fn share_state_summary(
        self: &Arc<Self>,
        key: &SharePartitionKey,
    ) -> Result<StateSummary, ResponseError> {
        match self.share_state_call(key, StateCall::Summary).await? {
            StateAnswer::Summary(summary) => Ok(summary),
            StateAnswer::Done | StateAnswer::State(_) => Err(ResponseError::UnknownServerError),
        }
    }

    /// Starts `key`'s durable state at `start_offset`, nothing in flight.
    pub(crate) async fn initialize_share_state(
        self: &Arc<Self>,
        key: &SharePartitionKey,
        start_offset: i64,
    ) -> Result<(), ResponseError> {
        self.share_state_call(key, StateCall::Initialize(0, start_offset))
            .await
            .map(drop)
    }

    /// Stores `write` as `key`'s state.
    pub(crate) async fn write_share_state(
        self: &Arc<Self>,
        key: &SharePartitionKey,
        write: &StateWrite,
    ) -> Result<(), ResponseError> {
        self.share_state_call(key, StateCall::Write(write))
            .await
            .map(drop)
    }

    /// `call` at `key`'s coordinator, tried again while it fails retriably.
    async fn share_state_call(
        self: &Arc<Self>,
        key: &SharePartitionKey,
        call: StateCall<'_>,
    ) -> Result<StateAnswer, ResponseError> {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 1;
        loop {
            match self.share_state_call_once(key, call).await {
                Err(error) if retriable(error) && attempt < ATTEMPTS => {
                    tracing::debug!(target: "weir::share", group = key.group, partition = key.partition, %error, attempt, "share coordinator call failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                    attempt += 1;
                }
                Err(error) => {
                    tracing::warn!(target: "weir::share", group = key.group, topic_id = %key.topic_id, partition = key.partition, %error, "share-partition state could not be read or stored");
                    return Err(error);
                }
                answer => return answer,
            }
        }
    }

    /// `call` at `key`'s coordinator, once.
    async fn share_state_call_once(
        self: &Arc<Self>,
        key: &SharePartitionKey,
        call: StateCall<'_>,
    ) -> Result<StateAnswer, ResponseError> {
        self.ensure_internal_topic(&self.share_state_topic)
            .await
            .map_err(|error| share_state_error(error.into()))?;
        let image = self.image();
        let coordinator = key_leader(&image, SHARE_GROUP_STATE_TOPIC, &key.coordinator_key())
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        if coordinator == self.identity.node_id {
            let local = &self.share_coordinator;
            return match call {
                StateCall::Read(leader_epoch) => {
                    local.read(key, leader_epoch).await.map(StateAnswer::State)
                }
                StateCall::Initialize(state_epoch, start_offset) => local
                    .initialize(key, state_epoch, start_offset)
                    .await
                    .map(|()| StateAnswer::Done),
                StateCall::Write(write) => {
                    local.write(key, write).await.map(|()| StateAnswer::Done)
                }
                StateCall::Summary => local.read_summary(key).map(StateAnswer::Summary),
            }
            .map_err(share_state_error);
        }
        let listener = &self.identity.inter_broker.listener;
        let endpoint = image
            .broker(coordinator)
            .and_then(|b| ClientEndpoint::on(b, listener))
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let address = format!("{}:{}", endpoint.host, endpoint.port);
        let client_id = format!("weir-share-state-{}", self.identity.node_id);
        let connection = self
            .share_links
            .to(&address, &client_id)
            .await
            .map_err(|_| ResponseError::NetworkException)?;
        let (code, state) = match call {
            StateCall::Read(leader_epoch) => {
                let request = read_request(key, leader_epoch);
                let response: ReadShareGroupStateResponse =
                    remote(&connection, ApiKey::ReadShareGroupState, (0, &request)).await?;
                let result = first_partition!(response);
                let state = PersistedState {
                    state_epoch: result.state_epoch,
                    start_offset: result.start_offset,
                    batches: result
                        .state_batches
                        .iter()
                        .map(|b| persisted_batch!(b))
                        .collect(),
                };
                (result.error_code, StateAnswer::State(state))
            }
            StateCall::Initialize(state_epoch, start_offset) => {
                let request = initialize_request(key, state_epoch, start_offset);
                let response: InitializeShareGroupStateResponse = remote(
                    &connection,
                    ApiKey::InitializeShareGroupState,
                    (0, &request),
                )
                .await?;
                (first_partition!(response).error_code, StateAnswer::Done)
            }
            StateCall::Write(write) => {
                let request = write_request(key, write);
                let response: WriteShareGroupStateResponse =
                    remote(&connection, ApiKey::WriteShareGroupState, (0, &request)).await?;
                (first_partition!(response).error_code, StateAnswer::Done)
            }
            StateCall::Summary => {
                let request = summary_request(key);
                let response: ReadShareGroupStateSummaryResponse = remote(
                    &connection,
                    ApiKey::ReadShareGroupStateSummary,
                    (SUMMARY_API_VERSION, &request),
                )
                .await?;
                let result = first_partition!(response);
                let summary = StateSummary {
                    state_epoch: result.state_epoch,
                    leader_epoch: result.leader_epoch,
                    start_offset: result.start_offset,
                    delivery_complete_count: result.delivery_complete_count,
                };
                (result.error_code, StateAnswer::Summary(summary))
            }
        };
        match ResponseError::try_from_code(code) {
            None => Ok(state),
            Some(error) => Err(error),
        }
    }
}

/// The durable form of a leader's share-partition `state`, as a write replacing every batch
/// it covers.
pub(crate) fn state_write(state: &ShareState, state_epoch: i32, leader_epoch: i32) -> StateWrite {
    StateWrite {
        state_epoch,
        leader_epoch,
        start_offset: state.start_offset,
        batches: state
            .batches
            .iter()
            .map(|b| PersistedBatch {
                first_offset: b.first_offset,
                last_offset: b.last_offset,
                delivery_state: b.state.code(),
                delivery_count: i16::try_from(b.delivery_count).unwrap_or(i16::MAX),
            })
            .collect(),
    }
}

/// A share-partition's state as its coordinator stored it, for the leader to restore (batches
/// of an unknown state are left out: their records are delivered again).
pub(crate) fn restored(persisted: &PersistedState) -> ShareState {
    ShareState {
        start_offset: persisted.start_offset,
        batches: persisted
            .batches
            .iter()
            .filter_map(|b| {
                Some(StateBatch {
                    first_offset: b.first_offset,
                    last_offset: b.last_offset,
                    state: RecordState::from_code(b.delivery_state)?,
                    delivery_count: u16::try_from(b.delivery_count).unwrap_or(0),
                })
            })
            .collect(),
    }
}

/// The first partition's result of a share-state response (brokers send one partition each).
macro_rules! first_partition {
    ($response:expr) => {
        $response
            .results
            .into_iter()
            .flat_map(|topic| topic.partitions)
            .next()
            .ok_or(ResponseError::UnknownServerError)?
    };
}
use first_partition;

/// `request` (at its version) at another broker over `connection`.
pub(crate) async fn remote<Req: Encodable, Resp: Decodable>(
    connection: &Connection,
    api: ApiKey,
    (version, request): (i16, &Req),
) -> Result<Resp, ResponseError> {
    connection
        .call_at(api, version, request)
        .await
        .map_err(|_| ResponseError::NetworkException)
}

/// ReadShareGroupStateSummary for `key`.
fn summary_request(key: &SharePartitionKey) -> ReadShareGroupStateSummaryRequest {
    let mut partition = read_share_group_state_summary_request::PartitionData::default();
    partition.partition = key.partition;
    partition.leader_epoch = -1;
    let mut topic = read_share_group_state_summary_request::ReadStateSummaryData::default();
    topic.topic_id = key.topic_id;
    topic.partitions = vec![partition];
    let mut request = ReadShareGroupStateSummaryRequest::default();
    request.group_id = str_bytes(key.group.clone());
    request.topics = vec![topic];
    request
}

/// ReadShareGroupState for `key`.
fn read_request(key: &SharePartitionKey, leader_epoch: i32) -> ReadShareGroupStateRequest {
    let mut partition = read_share_group_state_request::PartitionData::default();
    partition.partition = key.partition;
    partition.leader_epoch = leader_epoch;
    let mut topic = read_share_group_state_request::ReadStateData::default();
    topic.topic_id = key.topic_id;
    topic.partitions = vec![partition];
    let mut request = ReadShareGroupStateRequest::default();
    request.group_id = str_bytes(key.group.clone());
    request.topics = vec![topic];
    request
}

/// InitializeShareGroupState for `key`.
fn initialize_request(
    key: &SharePartitionKey,
    state_epoch: i32,
    start_offset: i64,
) -> InitializeShareGroupStateRequest {
    let mut partition = initialize_share_group_state_request::PartitionData::default();
    partition.partition = key.partition;
    partition.state_epoch = state_epoch;
    partition.start_offset = start_offset;
    let mut topic = initialize_share_group_state_request::InitializeStateData::default();
    topic.topic_id = key.topic_id;
    topic.partitions = vec![partition];
    let mut request = InitializeShareGroupStateRequest::default();
    request.group_id = str_bytes(key.group.clone());
    request.topics = vec![topic];
    request
}

/// WriteShareGroupState for `key`.
fn write_request(key: &SharePartitionKey, write: &StateWrite) -> WriteShareGroupStateRequest {
    let mut partition = write_share_group_state_request::PartitionData::default();
    partition.partition = key.partition;
    partition.state_epoch = write.state_epoch;
    partition.leader_epoch = write.leader_epoch;
    partition.start_offset = write.start_offset;
    partition.state_batches = write
        .batches
        .iter()
        .map(|b| wire_batch!(write_share_group_state_request::StateBatch, b))
        .collect();
    let mut topic = write_share_group_state_request::WriteStateData::default();
    topic.topic_id = key.topic_id;
    topic.partitions = vec![partition];
    let mut request = WriteShareGroupStateRequest::default();
    request.group_id = str_bytes(key.group.clone());
    request.topics = vec![topic];
    request
}
