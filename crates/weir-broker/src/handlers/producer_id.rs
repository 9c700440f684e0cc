//! InitProducerId (key 22), v0–4: producer ids for idempotent producers.

use std::sync::Arc;

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use crate::broker::Broker;
use crate::handlers::errors::ErrorReply;

/// Gives an idempotent producer a fresh id at epoch 0 (Kafka does the same for a producer
/// without a transactional id, including one bumping its epoch). Transactions are refused
/// until the transaction coordinator exists.
pub async fn handle(
    broker: &Arc<Broker>,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut response = InitProducerIdResponse::default();
    response.producer_id = ProducerId(-1);
    response.producer_epoch = -1;
    if request.transactional_id.is_some() {
        response.error_code = ResponseError::InvalidRequest.code();
        return response;
    }
    match broker.next_producer_id().await {
        Ok(id) => {
            response.producer_id = ProducerId(id);
            response.producer_epoch = 0;
        }
        Err(error) => response.error_code = ErrorReply::from(&error).code(),
    }
    response
}
