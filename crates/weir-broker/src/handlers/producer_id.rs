//! InitProducerId (key 22), v0–4: producer ids for idempotent producers, and for
//! transactional ones an id and epoch from the transaction coordinator.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;
use weir_coordinator::transaction::{InitOutcome, InitProducerId, ProducerIdAndEpoch};
use weir_metadata::acl::AclOperation;
use weir_metadata::authorizer::Access;

use crate::broker::Broker;
use crate::handlers::errors::{txn_error, ErrorReply};

/// An idempotent producer gets a fresh id at epoch 0 (Kafka does the same for one without a
/// transactional id, including one bumping its epoch). A transactional producer gets the
/// id its transactional id keeps and that id's next epoch, which fences older producers of
/// the same transactional id.
pub async fn handle(
    broker: &Arc<Broker>,
    request: InitProducerIdRequest,
    version: i16,
    access: &Access,
) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    // A transactional producer needs WRITE on its transactional id; an idempotent one
    // IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679).
    let outcome = match &request.transactional_id {
        Some(id) if !access.transactional_id(AclOperation::Write, id) => {
            Err(ResponseError::TransactionalIdAuthorizationFailed.code())
        }
        None if !access.idempotent_write() => Err(ResponseError::ClusterAuthorizationFailed.code()),
        Some(transactional_id) => transactional(broker, &request, transactional_id, version).await,
        None => broker
            .next_producer_id()
            .await
            .map(|producer_id| ProducerIdAndEpoch {
                producer_id,
                epoch: 0,
            })
            .map_err(|error| ErrorReply::from(&error).code()),
    };
    match outcome {
        Ok(ready) => {
            response.producer_id = ProducerId(ready.producer_id);
            response.producer_epoch = ready.epoch;
        }
        Err(code) => response.error_code = code,
    }
    response
}

/// The transaction coordinator's answer for `transactional_id`, asking the controller for a
/// producer id only when the coordinator needs a new one. An error is its wire code.
async fn transactional(
    broker: &Arc<Broker>,
    request: &InitProducerIdRequest,
    transactional_id: &str,
    version: i16,
) -> Result<ProducerIdAndEpoch, i16> {
    let current = match (request.producer_id.0, request.producer_epoch) {
        (-1, -1) => None,
        (producer_id, epoch) if producer_id >= 0 && epoch >= 0 => {
            Some(ProducerIdAndEpoch { producer_id, epoch })
        }
        // An id without an epoch, or the reverse.
        _ => return Err(ResponseError::InvalidRequest.code()),
    };
    let init = InitProducerId {
        transactional_id: transactional_id.to_string(),
        timeout_ms: request.transaction_timeout_ms,
        current,
    };
    let mut fresh_id = None;
    loop {
        match broker.transactions.init_producer_id(&init, fresh_id).await {
            Ok(InitOutcome::Ready(ready)) => return Ok(ready),
            Ok(InitOutcome::NeedsProducerId) if fresh_id.is_none() => {
                let id = broker
                    .next_producer_id()
                    .await
                    .map_err(|error| ErrorReply::from(&error).code())?;
                fresh_id = Some(id);
            }
            // An older producer's open transaction is being aborted: the client retries once
            // it is.
            Ok(InitOutcome::Aborting(markers)) => {
                broker.write_markers(markers);
                return Err(ResponseError::ConcurrentTransactions.code());
            }
            // The coordinator asked twice (the id it was given went to a concurrent request
            // and it needs another): the client retries.
            Ok(InitOutcome::NeedsProducerId) => {
                return Err(ResponseError::ConcurrentTransactions.code());
            }
            Err(error) => {
                let error = match txn_error(error) {
                    // Clients before v4 know a fenced producer as INVALID_PRODUCER_EPOCH.
                    ResponseError::ProducerFenced if version < 4 => {
                        ResponseError::InvalidProducerEpoch
                    }
                    error => error,
                };
                return Err(error.code());
            }
        }
    }
}
